"""posgpt <-> Hugging Face transformers folders (config.json + model.safetensors), by hand:
no transformers needed to convert, only to run the result. docs/interop.md has the table.

    learned -> GPT2LMHeadModel     exact GELU ("gelu"), LayerNorm, tied embeddings
    rope    -> GPTNeoXForCausalLM  LayerNorm + GELU, parallel residual or not, tied or untied (embed_out)
    rope    -> LlamaForCausalLM    rmsnorm + swiglu, n_kv_head as num_key_value_heads, tied or untied

Only the names and layouts differ: GPT-2's Conv1D stores weights transposed (in, out);
GPT-NeoX's query_key_value interleaves q, k, v per head ((H, 3, D) rows where posgpt has
(3, H, D)); Llama's q_proj, k_proj, v_proj (and gate_proj, up_proj) are posgpt's c_attn (c_fc)
rows in that order. bias=False is written as zero biases (Llama: attention_bias=mlp_bias=false)
and read back as bias=False when every bias is zero. RoPE pairs are half-split in all three.
Scaling is written as transformers v5 reads it (`rope_parameters`) and v4 did (`rope_scaling`,
rotary_pct, rotary_emb_base), its settings under the names of positional/rope_scaling/hf.py.
"""
import json
import os

import torch

import positional
from positional.rope_scaling.hf import KEYS, TYPES, from_hf
from training.config import upgrade_model_args

NEOX, GPT2, LLAMA = "GPTNeoXForCausalLM", "GPT2LMHeadModel", "LlamaForCausalLM"
MODEL_TYPES = {GPT2: "gpt2", NEOX: "gpt_neox", LLAMA: "llama"}
ARCHITECTURE = {"learned": GPT2, "rope": NEOX}          # posgpt encoding -> architecture (rope: or LLAMA, by its block)
SUPPORTED = {GPT2: "learned", NEOX: "rope, layernorm + gelu", LLAMA: "rope, rmsnorm + swiglu"}
# rope_type -> the keys transformers' RoPE init reads (modeling_rope_utils, v5.24); dynamic reads its L
# from max_position_embeddings
HF_KEYS = {t: TYPES[t][1] for t in ("linear", "dynamic", "yarn", "llama3", "longrope")} | {"dynamic": ("factor",)}
# model keys whose default is the only value every architecture has, then those fixed by each architecture
PLAIN = dict(window=0, sinks=0, attention="softmax", qk_norm=False, logn_scaling=False, ssmax=False,
             layer_encodings="", layer_windows="")
FIXED = {GPT2: dict(norm="layernorm", mlp="gelu", n_kv_head=0, tie_embeddings=True, parallel_residual=False),
         NEOX: dict(norm="layernorm", mlp="gelu", n_kv_head=0),
         LLAMA: dict(norm="rmsnorm", mlp="swiglu", parallel_residual=False)}
HEAD = {NEOX: "embed_out.weight", LLAMA: "lm_head.weight"}     # an untied output embedding


class InteropError(ValueError):
    """A model or folder that cannot be converted (one line)."""


# ---- the names: (posgpt weight, HF weight(s), layout, has_bias) per module; biases follow their weight --

def names(arch, n_layer, tied=True):
    """[(posgpt name, HF name, layout, has_bias)]; layout None, "T" (Conv1D) or "qkv" (per-head q, k, v).
    A tuple of HF names: their rows stacked in posgpt's one matrix (q, k, v; SwiGLU's gate, up)."""
    if arch == GPT2:
        top = [("wte.weight", "transformer.wte.weight", None, False),
               ("pe.wpe.weight", "transformer.wpe.weight", None, False),
               ("ln_f.weight", "transformer.ln_f.weight", None, True)]
        layer = [("ln_1", "ln_1", None, True), ("attn.c_attn", "attn.c_attn", "T", True),
                 ("attn.c_proj", "attn.c_proj", "T", True), ("ln_2", "ln_2", None, True),
                 ("mlp.c_fc", "mlp.c_fc", "T", True), ("mlp.c_proj", "mlp.c_proj", "T", True)]
        prefix = "transformer.h"
    elif arch == NEOX:
        top = [("wte.weight", "gpt_neox.embed_in.weight", None, False),
               ("ln_f.weight", "gpt_neox.final_layer_norm.weight", None, True)]
        layer = [("ln_1", "input_layernorm", None, True), ("attn.c_attn", "attention.query_key_value", "qkv", True),
                 ("attn.c_proj", "attention.dense", None, True), ("ln_2", "post_attention_layernorm", None, True),
                 ("mlp.c_fc", "mlp.dense_h_to_4h", None, True), ("mlp.c_proj", "mlp.dense_4h_to_h", None, True)]
        prefix = "gpt_neox.layers"
    else:  # RMSNorm has no bias; the linear layers have one where attention_bias / mlp_bias say so
        top = [("wte.weight", "model.embed_tokens.weight", None, False),
               ("ln_f.weight", "model.norm.weight", None, False)]
        layer = [("ln_1", "input_layernorm", None, False),
                 ("attn.c_attn", tuple(f"self_attn.{n}_proj" for n in "qkv"), None, True),
                 ("attn.c_proj", "self_attn.o_proj", None, True), ("ln_2", "post_attention_layernorm", None, False),
                 ("mlp.c_fc", ("mlp.gate_proj", "mlp.up_proj"), None, True),
                 ("mlp.c_proj", "mlp.down_proj", None, True)]
        prefix = "model.layers"
    head = [] if tied else [("lm_head.weight", HEAD[arch], None, False)]
    return top + head + [(f"h.{i}.{a}.weight", tuple(f"{prefix}.{i}.{n}.weight" for n in b) if isinstance(b, tuple) else
                          f"{prefix}.{i}.{b}.weight", how, bias) for i in range(n_layer) for a, b, how, bias in layer]


def bias_name(theirs):
    return tuple(bias_name(n) for n in theirs) if isinstance(theirs, tuple) else theirs[:-len("weight")] + "bias"


def relayout(t, how, n_head, to_hf):
    """A posgpt tensor in HF's layout (to_hf) or back."""
    if how == "T" and t.dim() == 2:
        return t.t().contiguous()
    if how == "qkv":  # rows (3, H, D) <-> (H, 3, D), for the weight (3C, C) and the bias (3C,)
        split = (3, n_head, -1) if to_hf else (n_head, 3, -1)
        return t.reshape(*split, *t.shape[1:]).transpose(0, 1).reshape(t.shape).contiguous()
    return t


def pieces(t, theirs, q_rows):
    """{HF name: tensor} of a posgpt tensor: stacked rows split as q (q_rows), k, v, or gate, up in halves."""
    if isinstance(theirs, str):
        return {theirs: t}
    first = q_rows if len(theirs) == 3 else t.shape[0] // 2
    rest = (t.shape[0] - first) // (len(theirs) - 1)
    return dict(zip(theirs, (p.contiguous() for p in t.split([first] + [rest] * (len(theirs) - 1)))))


def stacked(tensors, theirs):
    """posgpt's tensor of HF tensors, or None if one is missing."""
    parts = [tensors.get(n) for n in ((theirs,) if isinstance(theirs, str) else theirs)]
    return None if any(p is None for p in parts) else torch.cat([p.float() for p in parts])


# ---- export ------------------------------------------------------------------------------------------

def target(args):
    """The transformers architecture a posgpt model would be: GPT-2 for learned, Llama for a rope model
    with a Llama-style block, GPT-NeoX for the other rope models; None for the other encodings."""
    arch = ARCHITECTURE.get(args["pos_encoding"])
    return LLAMA if arch == NEOX and (args["norm"] == "rmsnorm" or args["mlp"] == "swiglu") else arch


def export_problem(model_args):
    """Why this model has no transformers counterpart (one line), or None."""
    args = upgrade_model_args(model_args)
    arch = target(args)
    if arch is None:
        return (f"{args['pos_encoding']} has no transformers architecture "
                f"({', '.join(f'{a} takes {e}' for a, e in SUPPORTED.items())})")
    args = dict(args, n_kv_head=0 if args["n_kv_head"] == args["n_head"] else args["n_kv_head"])
    odd = [f"{k}={args[k]!r}" for k, v in {**PLAIN, **FIXED[arch]}.items() if args[k] != v]
    if odd:
        return f"{', '.join(odd)} has no counterpart in transformers' {arch}"
    s, kind, head_dim = args["pos_settings"], args["rope_scaling"], args["n_embd"] // args["n_head"]
    fraction = s.get("rotary_fraction", 1.0)
    if arch == LLAMA and fraction != 1.0:
        return f"rotary_fraction={fraction} has no counterpart in transformers' {LLAMA} (it rotates whole heads)"
    if int(head_dim * fraction) != int(round(head_dim * fraction)):
        return f"rotary_fraction {fraction} of head_dim {head_dim} rounds differently in GPT-NeoX"
    if kind and kind not in HF_KEYS:
        return f"rope_scaling={kind} has no transformers rope_type ({', '.join(HF_KEYS)} do)"
    if s.get("rope_ramp", "index") != "index":
        return f"rope_ramp={s['rope_ramp']!r} has no transformers form (transformers ramps by index)"
    return None


def reads_l_from_max_position(kind):
    """Whether transformers reads the rope_type's original length L from max_position_embeddings (dynamic's), not
    from original_max_position_embeddings."""
    L = "original_max_position_embeddings"
    return kind in HF_KEYS and L in TYPES[kind][1] and L not in HF_KEYS[kind]


def rope_parameters(args):
    """(transformers v5 rope_parameters dict, max_position_embeddings) of a rope model."""
    s, kind, block = args["pos_settings"], args["rope_scaling"], args["block_size"]
    out = {"rope_type": kind or "default", "rope_theta": s["rope_base"], "partial_rotary_factor": s["rotary_fraction"]}
    if not kind:
        return out, block
    L = s["rope_original_max_position"] or block
    ours = dict(s, rope_original_max_position=L)
    pairs = int(round(args["n_embd"] // args["n_head"] * s["rotary_fraction"])) // 2
    for key in HF_KEYS[kind]:  # a float setting of 0 means unset (HF's null); an empty factor list, 1 per pair
        value = ours[KEYS[key]]
        if not (isinstance(value, float) and value == 0.0):
            out[key] = value if value != [] else [1.0] * pairs
    # max_position_embeddings: L for the method that reads L there (dynamic); the extended length L x factor
    # where L is written (v4 derived yarn's factor from the two)
    if reads_l_from_max_position(kind):
        return out, L
    return out, int(L * s["rope_factor"]) if "original_max_position_embeddings" in out else block


def to_hf(model_args, state_dict):
    """(config.json dict, {HF name: tensor}) of a posgpt model; InteropError if it has no counterpart."""
    problem = export_problem(model_args)
    if problem:
        raise InteropError(problem)
    args = upgrade_model_args(model_args)
    C, H, L, V, eps = args["n_embd"], args["n_head"], args["n_layer"], args["vocab_size"], args["norm_eps"]
    arch, tied, kv = target(args), args["tie_embeddings"], args["n_kv_head"] or H
    hidden = state_dict["h.0.mlp.c_proj.weight"].shape[1]
    if arch == GPT2:
        config = dict(model_type="gpt2", n_embd=C, n_head=H, n_layer=L, n_positions=args["block_size"],
                      n_inner=None if hidden == 4 * C else hidden, activation_function="gelu", layer_norm_epsilon=eps,
                      scale_attn_weights=True)
    else:
        rope, max_pos = rope_parameters(args)
        config = dict(hidden_size=C, num_attention_heads=H, num_hidden_layers=L, intermediate_size=hidden,
                      max_position_embeddings=max_pos, rope_parameters=rope)
        if arch == NEOX:
            config.update(model_type="gpt_neox", hidden_act="gelu", layer_norm_eps=eps, attention_bias=True,
                          use_parallel_residual=args["parallel_residual"], rotary_pct=rope["partial_rotary_factor"],
                          rotary_emb_base=rope["rope_theta"])
        else:
            config.update(model_type="llama", num_key_value_heads=kv, head_dim=C // H, hidden_act="silu",
                          rms_norm_eps=eps, attention_bias=args["bias"], mlp_bias=args["bias"],
                          rope_theta=rope["rope_theta"])
        if rope["rope_type"] != "default":
            config["rope_scaling"] = {k: v for k, v in rope.items() if k not in ("rope_theta", "partial_rotary_factor")}
    config.update(architectures=[arch], vocab_size=V, tie_word_embeddings=tied, bos_token_id=None,
                  eos_token_id=None, dtype="float32")
    tensors = {}
    for ours, theirs, how, has_bias in names(arch, L, tied):
        w = state_dict[ours].float()
        tensors.update(pieces(relayout(w, how, H, True), theirs, C))
        if has_bias and (arch != LLAMA or args["bias"]):   # GPT-2 and GPT-NeoX always have biases
            b = state_dict.get(ours[:-len("weight")] + "bias")
            b = torch.zeros(w.shape[0]) if b is None else b.float()
            tensors.update(pieces(relayout(b, how, H, True), bias_name(theirs), C))
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
    for name, model_type in MODEL_TYPES.items():
        if arch == name or kind == model_type:
            return name
    raise InteropError(f"{path}: architecture {arch or kind or '(none named)'} is not supported; supported: "
                       f"{', '.join(f'{a} ({e})' for a, e in SUPPORTED.items())}")


def rope_args(c, theta, fraction):
    """(method, settings) of a config's RoPE, from v5's rope_parameters or v4's rope_scaling; theta and
    fraction: where v4 kept the base and the rotary fraction, (key, default)."""
    rp = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
    rp.setdefault("rope_theta", c.get(*theta))
    rp.setdefault("partial_rotary_factor", c.get(*fraction))
    kind = rp.get("rope_type", rp.get("type"))
    method = TYPES[kind][0] if kind in TYPES else ""   # from_hf refuses an unknown type below
    if method and "original_max_position_embeddings" in TYPES[kind][1]:
        # L: max_position_embeddings for the method that reads it there, else by default (as transformers)
        L = c["max_position_embeddings"]
        rp["original_max_position_embeddings"] = L if reads_l_from_max_position(kind) else rp.get(
            "original_max_position_embeddings", L)
        if rp.get("factor") is None and "short_factor" in TYPES[kind][1]:   # longrope: s = max / L, as transformers
            rp["factor"] = c["max_position_embeddings"] / rp["original_max_position_embeddings"]
    return from_hf(rp)


def model_args_of(arch, c):
    """posgpt model_args of a transformers config (GPT-2, GPT-NeoX or Llama)."""
    if arch == GPT2:
        C = c["n_embd"]
        args = dict(n_layer=c["n_layer"], n_head=c["n_head"], n_embd=C, block_size=c["n_positions"],
                    pos_encoding="learned", rope_scaling="", settings={}, norm_eps=c.get("layer_norm_epsilon", 1e-5),
                    mlp_hidden=0 if c.get("n_inner") in (None, 4 * C) else c["n_inner"])
        check = {"scale_attn_by_inverse_layer_idx": (c.get("scale_attn_by_inverse_layer_idx", False), (False,)),
                 "activation_function": (c.get("activation_function", "gelu_new"), ("gelu", "gelu_new"))}
        return args, check
    C, H = c["hidden_size"], c["num_attention_heads"]
    args = dict(n_layer=c["num_hidden_layers"], n_head=H, n_embd=C, block_size=c["max_position_embeddings"],
                pos_encoding="rope")
    if arch == NEOX:
        method, settings = rope_args(c, ("rotary_emb_base", 10000.0), ("rotary_pct", 0.25))
        hidden = c.get("intermediate_size") or 4 * C
        args.update(norm_eps=c.get("layer_norm_eps", 1e-5), mlp_hidden=0 if hidden == 4 * C else hidden,
                    parallel_residual=c.get("use_parallel_residual", True))
        check = {"hidden_act": (c.get("hidden_act", "gelu"), ("gelu",))}
    else:
        method, settings = rope_args(c, ("rope_theta", 10000.0), ("partial_rotary_factor", 1.0))
        kv = c.get("num_key_value_heads") or H
        args.update(norm="rmsnorm", mlp="swiglu", mlp_hidden=c["intermediate_size"], n_kv_head=0 if kv == H else kv,
                    norm_eps=c.get("rms_norm_eps", 1e-6))
        check = {"hidden_act": (c.get("hidden_act", "silu"), ("silu",)),
                 "head_dim": (c.get("head_dim") or C // H, (C // H,))}
    return dict(args, rope_scaling=method, settings=settings), check


def to_posgpt(config, tensors, path):
    """(model_args, state_dict, note) of a transformers folder's config and weights (read_folder); note: a
    line to print, or None."""
    arch = architecture(config, path)
    if arch == GPT2:  # the first GPT-2 releases name the base model's weights without "transformer."
        named = ("transformer.", "lm_head.")
        tensors = {k if k.startswith(named) else f"transformer.{k}": v for k, v in tensors.items()}
    a, check = model_args_of(arch, config)
    for key, (have, ok) in check.items():
        if have not in ok:
            raise InteropError(f"{key}={have!r} has no posgpt counterpart (posgpt takes {' or '.join(map(repr, ok))})")
    # untied: an output embedding saved that differs from the input one, or that the config says is untied
    head, wte = tensors.get(HEAD.get(arch, "")), tensors.get(names(arch, 0)[0][1])
    tied = head is None or (wte is not None and config.get("tie_word_embeddings", True) and torch.equal(head, wte))
    entries = names(arch, a["n_layer"], tied)
    missing = [n for _, theirs, _, _ in entries for n in ((theirs,) if isinstance(theirs, str) else theirs)
               if n not in tensors]
    if missing:
        raise InteropError(f"{path}: the weights lack {missing[0]}" + (f" and {len(missing) - 1} more" if
                                                                         len(missing) > 1 else ""))
    H, state = a["n_head"], {}
    for ours, theirs, how, has_bias in entries:
        state[ours] = relayout(stacked(tensors, theirs), how, H, False)
        if has_bias:
            b = stacked(tensors, bias_name(theirs))   # a missing bias (Llama's attention_bias=false): zeros
            state[ours[:-len("weight")] + "bias"] = torch.zeros(state[ours].shape[0]) if b is None else relayout(
                b, how, H, False)
    bias = any(bool(v.any()) for k, v in state.items() if k.endswith(".bias"))
    if not bias:
        state = {k: v for k, v in state.items() if not k.endswith(".bias")}
    if tied:
        state["lm_head.weight"] = state["wte.weight"]
    settings = a.pop("settings")
    args = dict(a, vocab_size=config["vocab_size"], bias=bias, tie_embeddings=tied,
                pos_settings=positional.resolve(a["pos_encoding"], a["rope_scaling"], settings))
    note = None
    if config.get("activation_function") == "gelu_new":
        note = (f"note: {path} uses gelu_new (tanh GELU); posgpt's MLP is exact GELU, as nanoGPT's with GPT-2's "
                f"weights: logits differ slightly")
    return args, state, note
