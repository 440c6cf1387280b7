"""posgpt <-> Hugging Face transformers folders (config.json + model.safetensors), by hand:
no transformers needed to convert, only to run the result.

    learned -> GPT2LMHeadModel     exact GELU ("gelu"), LayerNorm eps 1e-5, tied embeddings
    rope    -> GPTNeoXForCausalLM  use_parallel_residual=False, rotary_pct = rotary_fraction,
                                   the rope_scaling method as transformers' rope_type

posgpt's block is GPT-2's (pre-LayerNorm, attention then MLP, 4C GELU MLP, tied embeddings),
so only the names and layouts differ: GPT-2's Conv1D stores weights transposed (in, out);
GPT-NeoX's query_key_value interleaves q, k, v per head ((H, 3, D) rows where posgpt has
(3, H, D)); bias=False is written as zero biases and read back as bias=False when every bias
is zero. RoPE pairs are half-split in both (GPT-NeoX's rotate_half).

Scaling, written both as transformers v5 reads it (`rope_parameters`, rope_theta and
partial_rotary_factor inside) and v4 (`rope_scaling`, rotary_pct, rotary_emb_base): the methods
of HF_KEYS, under the same rope_type, their settings under the HF names of
positional/rope_scaling/hf.py (the reader: one table both ways). Where transformers reads L:
original_max_position_embeddings, except for the method whose frequencies follow the length
(dynamic), which takes it from max_position_embeddings. Everything else (other encodings and
methods, windows, qk_norm, the turns ramp, ...) has no transformers counterpart: export_problem
names it. The tables are this module's only knowledge of encoding and method names.
"""
import json
import os

import torch

import positional
from positional.rope_scaling import METHODS
from positional.rope_scaling.hf import KEYS, TYPES, from_hf
from training.config import upgrade_model_args

NEOX, GPT2 = "GPTNeoXForCausalLM", "GPT2LMHeadModel"
ARCHITECTURE = {"learned": GPT2, "rope": NEOX}          # posgpt encoding -> transformers architecture
SUPPORTED = {GPT2: "learned", NEOX: "rope (use_parallel_residual=False)"}
HF_KEYS = {  # rope_type -> the keys transformers' RoPE init reads (modeling_rope_utils, v5.24)
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "truncate", "attention_factor",
             "mscale", "mscale_all_dim"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
}
LLAMA_STYLE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo", "smollm3")
# model keys whose default is the only value a GPT-2 / GPT-NeoX block has
PLAIN = dict(window=0, sinks=0, attention="softmax", qk_norm=False, logn_scaling=False, ssmax=False,
             layer_encodings="", layer_windows="")


class InteropError(ValueError):
    """A model or folder that cannot be converted (one line)."""


# ---- the names: (posgpt weight, HF weight, layout) per module; biases follow their weight --------

def names(arch, n_layer):
    """[(posgpt name, HF name, layout, has_bias)]; layout None, "T" (Conv1D) or "qkv" (per-head q, k, v)."""
    if arch == GPT2:
        top = [("wte.weight", "transformer.wte.weight", None, False),
               ("pe.wpe.weight", "transformer.wpe.weight", None, False),
               ("ln_f.weight", "transformer.ln_f.weight", None, True)]
        layer = [("ln_1", "ln_1", None), ("attn.c_attn", "attn.c_attn", "T"), ("attn.c_proj", "attn.c_proj", "T"),
                 ("ln_2", "ln_2", None), ("mlp.c_fc", "mlp.c_fc", "T"), ("mlp.c_proj", "mlp.c_proj", "T")]
        prefix = "transformer.h"
    else:
        top = [("wte.weight", "gpt_neox.embed_in.weight", None, False),
               ("ln_f.weight", "gpt_neox.final_layer_norm.weight", None, True)]
        layer = [("ln_1", "input_layernorm", None), ("attn.c_attn", "attention.query_key_value", "qkv"),
                 ("attn.c_proj", "attention.dense", None), ("ln_2", "post_attention_layernorm", None),
                 ("mlp.c_fc", "mlp.dense_h_to_4h", None), ("mlp.c_proj", "mlp.dense_4h_to_h", None)]
        prefix = "gpt_neox.layers"
    return top + [(f"h.{i}.{a}.weight", f"{prefix}.{i}.{b}.weight", how, True)
                  for i in range(n_layer) for a, b, how in layer]


def relayout(t, how, n_head, to_hf):
    """A posgpt tensor in HF's layout (to_hf) or back."""
    if how == "T" and t.dim() == 2:
        return t.t().contiguous()
    if how == "qkv":  # rows (3, H, D) <-> (H, 3, D), for the weight (3C, C) and the bias (3C,)
        split = (3, n_head, -1) if to_hf else (n_head, 3, -1)
        return t.reshape(*split, *t.shape[1:]).transpose(0, 1).reshape(t.shape).contiguous()
    return t


# ---- export ------------------------------------------------------------------------------------------

def export_problem(model_args):
    """Why this model has no transformers counterpart (one line), or None."""
    args = upgrade_model_args(model_args)
    if args["pos_encoding"] not in ARCHITECTURE:
        return (f"{args['pos_encoding']} has no transformers architecture "
                f"({', '.join(f'{a} takes {e}' for e, a in ARCHITECTURE.items())})")
    odd = [f"{k}={args[k]!r}" for k, v in PLAIN.items() if args[k] != v]
    if odd:
        return f"{', '.join(odd)} has no counterpart in transformers' GPT-2 / GPT-NeoX"
    s, kind, head_dim = args["pos_settings"], args["rope_scaling"], args["n_embd"] // args["n_head"]
    fraction = s.get("rotary_fraction", 1.0)
    if int(head_dim * fraction) != int(round(head_dim * fraction)):
        return f"rotary_fraction {fraction} of head_dim {head_dim} rounds differently in GPT-NeoX"
    if kind and kind not in HF_KEYS:
        return f"rope_scaling={kind} has no transformers rope_type ({', '.join(HF_KEYS)} do)"
    if s.get("rope_ramp", "index") != "index":
        return f"rope_ramp={s['rope_ramp']!r} has no transformers form (transformers ramps by index)"
    return None


def rope_parameters(args):
    """(transformers v5 rope_parameters dict, max_position_embeddings) of a rope model."""
    s, kind, block = args["pos_settings"], args["rope_scaling"], args["block_size"]
    out = {"rope_type": kind or "default", "rope_theta": s["rope_base"], "partial_rotary_factor": s["rotary_fraction"]}
    if not kind:
        return out, block
    L = s["rope_original_max_position"] or block
    ours = dict(s, rope_original_max_position=L)
    for key in HF_KEYS[kind]:  # a float setting of 0 means unset (HF's null)
        if not (isinstance(ours[KEYS[key]], float) and ours[KEYS[key]] == 0.0):
            out[key] = ours[KEYS[key]]
    # max_position_embeddings: L for the method whose frequencies follow the length (transformers reads L
    # there); the extended length L x factor where L is written (v4 derived yarn's factor from the two)
    if METHODS[kind][1].length_dependent:
        return out, L
    return out, int(L * s["rope_factor"]) if "original_max_position_embeddings" in out else block


def to_hf(model_args, state_dict):
    """(config.json dict, {HF name: tensor}) of a posgpt model; InteropError if it has no counterpart."""
    problem = export_problem(model_args)
    if problem:
        raise InteropError(problem)
    args = upgrade_model_args(model_args)
    C, H, L, V = args["n_embd"], args["n_head"], args["n_layer"], args["vocab_size"]
    arch = ARCHITECTURE[args["pos_encoding"]]
    if arch == GPT2:
        config = dict(model_type="gpt2", n_embd=C, n_head=H, n_layer=L, n_positions=args["block_size"], n_inner=None,
                      activation_function="gelu", layer_norm_epsilon=1e-5, scale_attn_weights=True)
    else:
        rope, max_pos = rope_parameters(args)
        config = dict(model_type="gpt_neox", hidden_size=C, num_attention_heads=H, num_hidden_layers=L,
                      intermediate_size=4 * C, hidden_act="gelu", layer_norm_eps=1e-5, use_parallel_residual=False,
                      attention_bias=True, max_position_embeddings=max_pos, rope_parameters=rope,
                      rotary_pct=rope["partial_rotary_factor"], rotary_emb_base=rope["rope_theta"])
        if rope["rope_type"] != "default":
            config["rope_scaling"] = {k: v for k, v in rope.items() if k not in ("rope_theta", "partial_rotary_factor")}
    config.update(architectures=[arch], vocab_size=V, tie_word_embeddings=True, bos_token_id=None,
                  eos_token_id=None, dtype="float32")
    tensors = {}
    for ours, theirs, how, has_bias in names(arch, L):
        w = state_dict[ours].float()
        tensors[theirs] = relayout(w, how, H, True)
        if has_bias:
            b = state_dict.get(ours[:-len("weight")] + "bias")
            b = torch.zeros(w.shape[0]) if b is None else b.float()
            tensors[theirs[:-len("weight")] + "bias"] = relayout(b, how, H, True)
    return config, tensors


# ---- import ------------------------------------------------------------------------------------------

def read_folder(path):
    """(config dict, {name: tensor}) of a local transformers folder."""
    from safetensors.torch import load_file
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise InteropError(f"{path} has no config.json: not a transformers model folder (the hub is not used; "
                           f"give a local folder)")
    with open(cfg_path) as f:
        config = json.load(f)
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors"))
    if files:
        tensors = {k: v for f in files for k, v in load_file(os.path.join(path, f)).items()}
    elif os.path.isfile(os.path.join(path, "pytorch_model.bin")):
        tensors = torch.load(os.path.join(path, "pytorch_model.bin"), map_location="cpu", weights_only=True)
    else:
        raise InteropError(f"{path} has a config.json but no weights (model.safetensors or pytorch_model.bin)")
    return config, tensors


def architecture(config, path):
    arch = (config.get("architectures") or [""])[0]
    kind = config.get("model_type", "")
    if kind in LLAMA_STYLE or (kind == "gpt_neox" and config.get("use_parallel_residual", True)):
        what = "GPT-NeoX's parallel residual" if kind == "gpt_neox" else f"{arch or kind} (RMSNorm, SwiGLU, GQA)"
        raise InteropError(f"{path}: {what} needs the Llama-style block keys (norm, mlp, n_kv_head, tie_embeddings, "
                           f"parallel_residual), not built yet; supported now: GPT-2, GPT-NeoX with "
                           f"use_parallel_residual=false")
    for name, model_type in ((GPT2, "gpt2"), (NEOX, "gpt_neox")):
        if arch == name or kind == model_type:
            return name
    raise InteropError(f"{path}: architecture {arch or kind or '(none named)'} is not supported; supported: "
                       f"{', '.join(f'{a} ({e})' for a, e in SUPPORTED.items())}")


def encoding_of(arch):
    return next(e for e, a in ARCHITECTURE.items() if a == arch)


def model_args_of(arch, c):
    """posgpt model_args of a transformers config (GPT-2 or GPT-NeoX)."""
    if arch == GPT2:
        args = dict(n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"], block_size=c["n_positions"],
                    pos_encoding=encoding_of(GPT2), rope_scaling="", settings={})
        check = {"n_inner": (c.get("n_inner"), (None, 4 * c["n_embd"])),
                 "layer_norm_epsilon": (c.get("layer_norm_epsilon", 1e-5), (1e-5,)),
                 "scale_attn_by_inverse_layer_idx": (c.get("scale_attn_by_inverse_layer_idx", False), (False,)),
                 "activation_function": (c.get("activation_function", "gelu_new"), ("gelu", "gelu_new"))}
    else:
        rp = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
        rp.setdefault("rope_theta", c.get("rotary_emb_base", 10000.0))
        rp.setdefault("partial_rotary_factor", c.get("rotary_pct", 0.25))
        kind = rp.get("rope_type", rp.get("type"))
        method = TYPES[kind][0] if kind in TYPES else ""   # from_hf refuses an unknown type below
        if method and "original_max_position_embeddings" in TYPES[kind][1]:
            # L: max_position_embeddings for the length-following method, else by default (as transformers)
            L = c["max_position_embeddings"]
            rp["original_max_position_embeddings"] = L if METHODS[method][1].length_dependent else rp.get(
                "original_max_position_embeddings", L)
        method, settings = from_hf(rp)
        args = dict(n_layer=c["num_hidden_layers"], n_head=c["num_attention_heads"], n_embd=c["hidden_size"],
                    block_size=c["max_position_embeddings"], pos_encoding=encoding_of(NEOX), rope_scaling=method,
                    settings=settings)
        check = {"intermediate_size": (c.get("intermediate_size"), (4 * c["hidden_size"],)),
                 "layer_norm_eps": (c.get("layer_norm_eps", 1e-5), (1e-5,)),
                 "hidden_act": (c.get("hidden_act", "gelu"), ("gelu",))}
    for key, (have, ok) in check.items():
        if have not in ok:
            raise InteropError(f"{key}={have!r} has no posgpt counterpart (posgpt takes {' or '.join(map(repr, ok))})")
    return args


def from_hf_folder(path):
    """(model_args, state_dict, note) of a local transformers folder; note: a line to print, or None."""
    config, tensors = read_folder(path)
    arch = architecture(config, path)
    if arch == GPT2:  # the first GPT-2 releases name the base model's weights without "transformer."
        tensors = {k if k.startswith(("transformer.", "lm_head.")) else f"transformer.{k}": v for k, v in tensors.items()}
    a = model_args_of(arch, config)
    missing = [theirs for _, theirs, _, _ in names(arch, a["n_layer"]) if theirs not in tensors]
    if missing:
        raise InteropError(f"{path}: the weights lack {missing[0]}" + (f" and {len(missing) - 1} more" if
                                                                         len(missing) > 1 else ""))
    H, V = a["n_head"], config["vocab_size"]
    state, biases = {}, []
    for ours, theirs, how, has_bias in names(arch, a["n_layer"]):
        state[ours] = relayout(tensors[theirs].float(), how, H, False)
        if has_bias:
            b = tensors.get(theirs[:-len("weight")] + "bias")
            b = torch.zeros(state[ours].shape[0]) if b is None else relayout(b.float(), how, H, False)
            state[ours[:-len("weight")] + "bias"] = b
            biases.append(b)
    out = tensors.get("embed_out.weight", tensors.get("lm_head.weight"))
    if out is not None and not torch.equal(out.float(), state["wte.weight"]):
        raise InteropError(f"{path}: untied input and output embeddings need the Llama-style block keys "
                           f"(tie_embeddings), not built yet")
    bias = any(bool(b.any()) for b in biases)
    if not bias:
        state = {k: v for k, v in state.items() if not k.endswith(".bias")}
    state["lm_head.weight"] = state["wte.weight"]
    settings = a.pop("settings")
    args = dict(a, vocab_size=V, bias=bias, pos_settings=positional.resolve(a["pos_encoding"], a["rope_scaling"],
                                                                             settings))
    note = None
    if config.get("activation_function") == "gelu_new":
        note = (f"note: {path} uses gelu_new (tanh GELU); posgpt's MLP is exact GELU, as nanoGPT's with GPT-2's "
                f"weights: logits differ slightly")
    return args, state, note
