"""posgpt <-> Hugging Face transformers (interop/hf.py, export.py): float32 logits parity within
1e-4 on random sequences, both directions, for models built from configs with random weights
(never downloaded): GPT-2 <-> learned, GPT-NeoX <-> rope at rotary fractions 0.25 and 1, and
with linear, dynamic, yarn and llama3 scaling at 4x the original length, with and without the
parallel residual (Pythia's, untied); Llama with grouped-query attention and untied embeddings
<-> rope + rmsnorm + swiglu + n_kv_head, with each scaling. Export -> import -> export is
bitwise; an imported model's evaluate.py loss is transformers' loss on the same tokens; bad
input is one line each."""
import csv
import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, \
    GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM

import export
from data.tokenizer import tokenizer_from
from tests.conftest import TINY_TEXT, run_py, tiny_gpt
from tests.inproc import one_line_error
from training import checkpoint

pytestmark = pytest.mark.slow   # Hugging Face transformers models built, run and trained beside posgpt's

ORIG, T, V = 16, 64, 40          # original length, test length (4x), vocabulary
SCALINGS = {  # transformers rope_scaling dicts at 4x, and posgpt's method
    "": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": ORIG},
    "llama3": {"rope_type": "llama3", "factor": 4.0, "original_max_position_embeddings": ORIG,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0},
}
CASES = [(0.25, ""), (1.0, ""), *[(1.0, m) for m in SCALINGS if m]]


def randomize(model, seed=0):
    """Every weight (biases and norms too) N(0, 0.2): zero biases or unit gains would hide a wrong mapping."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model.eval()


def hf_neox(folder, rotary_pct=1.0, scaling=None, vocab_size=V, parallel=False, **kw):
    """parallel: Pythia's block (use_parallel_residual, untied embed_out)."""
    c = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, hidden_act="gelu", rotary_pct=rotary_pct, max_position_embeddings=ORIG,
                      rope_scaling=scaling, use_parallel_residual=parallel, tie_word_embeddings=not parallel, **kw)
    model = randomize(GPTNeoXForCausalLM(c))
    model.save_pretrained(folder)
    return model


def hf_llama(folder, scaling=None, tied=False, bias=False):
    """A Llama with grouped-query attention (4 query heads, 2 key/value heads), untied by default."""
    c = LlamaConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    intermediate_size=48, max_position_embeddings=ORIG, rope_scaling=scaling, rms_norm_eps=1e-5,
                    tie_word_embeddings=tied, attention_bias=bias, mlp_bias=bias, bos_token_id=None, eos_token_id=None)
    model = randomize(LlamaForCausalLM(c))
    model.save_pretrained(folder)
    return model


def hf_gpt2(folder):
    c = GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=T, activation_function="gelu",
                   bos_token_id=None, eos_token_id=None)
    model = randomize(GPT2LMHeadModel(c))
    model.save_pretrained(folder)
    return model


def idx():
    return torch.randint(0, V, (2, T), generator=torch.Generator().manual_seed(1))


def logits_diff(hf_model, model, x=None):
    x = idx() if x is None else x
    with torch.no_grad():
        return (hf_model(x).logits - model(x)[0]).abs().max().item()


def import_(folder, out):
    export.main(["--from=hf", str(folder), f"--out={out}"])
    return checkpoint.load_model(out)[0]


@pytest.mark.parametrize("fraction,method", CASES)
def test_import_gpt_neox_gives_the_same_logits(tmp_path, fraction, method):
    hf = hf_neox(tmp_path / "hf", fraction, SCALINGS[method])
    model = import_(tmp_path / "hf", tmp_path / "out")
    assert model.config.rope_scaling == method and model.config.pos_settings["rotary_fraction"] == fraction
    assert logits_diff(hf, model) <= 1e-4
    if method:  # the method matters at 4x: without it the logits are off by far more than the tolerance
        plain = checkpoint.load_model(tmp_path / "out", {"rope_scaling": ""}, strict=False)[0]
        assert logits_diff(hf, plain) > 1e-3


@pytest.mark.parametrize("fraction", [0.25, 1.0])
def test_import_pythia_block_gives_the_same_logits(tmp_path, fraction):
    hf = hf_neox(tmp_path / "hf", fraction, parallel=True)
    model = import_(tmp_path / "hf", tmp_path / "out")
    assert model.config.parallel_residual and not model.config.tie_embeddings
    assert logits_diff(hf, model) <= 1e-4
    serial = checkpoint.load_model(tmp_path / "out", {"parallel_residual": False}, strict=False)[0]
    assert logits_diff(hf, serial) > 1e-3         # the parallel residual matters


@pytest.mark.parametrize("method", SCALINGS)
def test_import_llama_gives_the_same_logits(tmp_path, method):
    hf = hf_llama(tmp_path / "hf", SCALINGS[method])
    model = import_(tmp_path / "hf", tmp_path / "out")
    c = model.config
    assert (c.norm, c.mlp, c.mlp_hidden, c.n_kv_head, c.tie_embeddings, c.bias) == ("rmsnorm", "swiglu", 48, 2, False,
                                                                                    False)
    assert c.rope_scaling == method and logits_diff(hf, model) <= 1e-4


def test_import_llama_with_biases_and_tied_embeddings(tmp_path):
    hf = hf_llama(tmp_path / "hf", tied=True, bias=True)
    model = import_(tmp_path / "hf", tmp_path / "out")
    assert model.config.tie_embeddings and model.config.bias and logits_diff(hf, model) <= 1e-4


def test_import_gpt2_gives_the_same_logits(tmp_path):
    hf = hf_gpt2(tmp_path / "hf")
    model = import_(tmp_path / "hf", tmp_path / "out")
    assert model.config.pos_encoding == "learned" and model.config.bias
    assert logits_diff(hf, model) <= 1e-4
    weights = load_file(tmp_path / "hf" / "model.safetensors")   # as the first GPT-2 releases name them
    save_file({k.removeprefix("transformer."): v for k, v in weights.items()}, tmp_path / "hf" / "model.safetensors")
    assert logits_diff(hf, import_(tmp_path / "hf", tmp_path / "old")) <= 1e-4


def posgpt_run(out, pos="rope", **settings):
    """A posgpt checkpoint of a random 2-layer model, with a character tokenizer."""
    model = randomize(tiny_gpt(pos, block_size=ORIG if pos == "rope" else T, **settings))
    chars = sorted(set(TINY_TEXT))[:V]
    tok = {"vocab_size": V, "stoi": {c: i for i, c in enumerate(chars)}, "itos": dict(enumerate(chars))}
    checkpoint.save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config), "config": {},
                     "iter_num": 0, "tokenizer": tok}, checkpoint.path_in(out))
    return model


def files(folder):
    return {f: open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))}


@pytest.mark.parametrize("fraction,method", CASES)
def test_export_rope_runs_in_transformers_and_round_trips_bitwise(tmp_path, fraction, method):
    settings = {"rotary_fraction": fraction}
    if method:
        settings.update(rope_scaling=method, rope_factor=4.0)
    model = posgpt_run(tmp_path / "run", **settings)
    export.main([str(tmp_path / "run"), "--to=hf", f"--out={tmp_path / 'hf'}"])
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == "GPTNeoXForCausalLM"
    assert logits_diff(hf, model) <= 1e-4
    import_(tmp_path / "hf", tmp_path / "back")
    export.main([str(tmp_path / "back"), "--to=hf", f"--out={tmp_path / 'hf2'}"])
    assert files(tmp_path / "hf") == files(tmp_path / "hf2")


BLOCKS = {"pythia": (dict(parallel_residual=True, tie_embeddings=False, bias=True), "GPTNeoXForCausalLM"),
          "llama": (dict(norm="rmsnorm", mlp="swiglu", n_kv_head=2, tie_embeddings=False), "LlamaForCausalLM"),
          "llama-tied": (dict(norm="rmsnorm", mlp="swiglu", mlp_hidden=40, bias=True), "LlamaForCausalLM")}


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("method", ["", "yarn", "llama3"])
def test_export_block_keys_run_in_transformers_and_round_trip_bitwise(tmp_path, block, method):
    keys, arch = BLOCKS[block]
    settings = dict(keys, rope_scaling=method, rope_factor=4.0) if method else keys
    model = posgpt_run(tmp_path / "run", **settings)
    export.main([str(tmp_path / "run"), "--to=hf", f"--out={tmp_path / 'hf'}"])
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == arch and logits_diff(hf, model) <= 1e-4
    back = import_(tmp_path / "hf", tmp_path / "back")
    assert {k: getattr(back.config, k) for k in keys} == keys
    export.main([str(tmp_path / "back"), "--to=hf", f"--out={tmp_path / 'hf2'}"])
    assert files(tmp_path / "hf") == files(tmp_path / "hf2")


def test_export_learned_is_gpt2_and_its_tokenizer_goes_along(tmp_path):
    model = posgpt_run(tmp_path / "run", "learned")
    export.main([str(tmp_path / "run"), "--to=hf", f"--out={tmp_path / 'hf'}"])
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == "GPT2LMHeadModel" and logits_diff(hf, model) <= 1e-4
    meta = checkpoint.load(tmp_path / "run")["tokenizer"]
    encode, _, _ = tokenizer_from(meta)
    text = "".join(c for c in TINY_TEXT[:200] if c in meta["stoi"])
    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert tok(text)["input_ids"] == encode(text) and tok.decode(encode(text)) == text
    back = import_(tmp_path / "hf", tmp_path / "back")     # the tokenizer comes back too
    assert checkpoint.load(tmp_path / "back")["tokenizer"]["stoi"] == tok.get_vocab()
    assert logits_diff(hf, back) == 0


@pytest.mark.parametrize("tied", [True, False])
def test_safetensors_release_form_loads_back(tmp_path, tied):
    model = posgpt_run(tmp_path / "run", "alibi", tie_embeddings=tied)
    export.main([str(tmp_path / "run"), "--to=safetensors"])
    assert {"model.safetensors", "config.json", "ckpt.pt"} <= set(os.listdir(tmp_path / "run"))
    back = import_(tmp_path / "run", tmp_path / "back")
    assert back.config == model.config
    with torch.no_grad():
        assert torch.equal(back(idx())[0], model(idx())[0])


@pytest.mark.parametrize("arch", ["neox", "llama"])
def test_imported_model_evaluates_to_transformers_loss(tmp_path, arch):
    hf = hf_neox(tmp_path / "hf", 0.25, SCALINGS["yarn"]) if arch == "neox" else hf_llama(tmp_path / "hf",
                                                                                            SCALINGS["llama3"])
    import_(tmp_path / "hf", tmp_path / "out")
    tokens = torch.randint(0, V, (257,), generator=torch.Generator().manual_seed(2))
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "val"):
        tokens.numpy().astype(np.uint16).tofile(data / f"{split}.bin")
    run_py("evaluate.py", str(tmp_path / "out"), f"--data_dir={data}", "--lengths=64", "--tokens_per_point=256",
           f"--report_dir={tmp_path / 'rep'}", "--device=cpu")
    with open(tmp_path / "rep" / "extrapolation.csv") as f:
        loss = float(next(csv.DictReader(f))["loss"])
    with torch.no_grad():
        x, y = tokens[:256].view(4, 64), tokens[1:257].view(4, 64)
        want = torch.nn.functional.cross_entropy(hf(x).logits.reshape(-1, V), y.reshape(-1)).item()
    assert abs(loss - want) <= 1e-4


def test_bad_input_is_one_line(tmp_path, capsys):
    posgpt_run(tmp_path / "alibi", "alibi")
    err = one_line_error(export.main, [str(tmp_path / "alibi"), "--to=hf", f"--out={tmp_path / 'hf'}"], capsys)
    assert "alibi has no transformers architecture" in err and "release form" in err
    posgpt_run(tmp_path / "ntk", rope_scaling="ntk", rope_factor=4.0)
    err = one_line_error(export.main, [str(tmp_path / "ntk"), "--to=hf", f"--out={tmp_path / 'hf_ntk'}"], capsys)
    assert "rope_scaling=ntk has no transformers rope_type (linear, dynamic, yarn, llama3, longrope do)" in err
    assert sorted(os.listdir(tmp_path / "hf")) == ["config.json", "model.safetensors"]   # the release form only
    posgpt_run(tmp_path / "mixed", norm="rmsnorm")
    err = one_line_error(export.main, [str(tmp_path / "mixed"), "--to=hf", f"--out={tmp_path / 'hf_mixed'}"], capsys)
    assert "mlp='gelu' has no counterpart in transformers' LlamaForCausalLM" in err
    posgpt_run(tmp_path / "partial", norm="rmsnorm", mlp="swiglu", rotary_fraction=0.5)
    err = one_line_error(export.main, [str(tmp_path / "partial"), "--to=hf", f"--out={tmp_path / 'hf_p'}"], capsys)
    assert "rotary_fraction=0.5 has no counterpart in transformers' LlamaForCausalLM" in err
    posgpt_run(tmp_path / "gqa", n_kv_head=2)
    err = one_line_error(export.main, [str(tmp_path / "gqa"), "--to=hf", f"--out={tmp_path / 'hf_gqa'}"], capsys)
    assert "n_kv_head=2 has no counterpart in transformers' GPTNeoXForCausalLM" in err
    c = GPTNeoXConfig(vocab_size=V, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128,
                      use_parallel_residual=True)
    GPTNeoXForCausalLM(c).save_pretrained(tmp_path / "parallel")
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"],
                                                               "model_type": "bert"}))
    err = one_line_error(export.main, ["--from=hf", str(tmp_path / "bert"), f"--out={tmp_path / 'o2'}"], capsys)
    assert "no weights" in err
    save_file({"x": torch.zeros(1)}, tmp_path / "bert" / "model.safetensors")
    err = one_line_error(export.main, ["--from=hf", str(tmp_path / "bert"), f"--out={tmp_path / 'o2'}"], capsys)
    assert ("BertForMaskedLM is not supported; supported: GPT2LMHeadModel (learned), GPTNeoXForCausalLM (rope, "
            "layernorm + gelu), LlamaForCausalLM (rope, rmsnorm + swiglu)") in err
    hf_llama(tmp_path / "llama")
    config = json.loads((tmp_path / "llama" / "config.json").read_text())
    (tmp_path / "llama" / "config.json").write_text(json.dumps(dict(config, hidden_act="gelu")))
    err = one_line_error(export.main, ["--from=hf", str(tmp_path / "llama"), f"--out={tmp_path / 'o3'}"], capsys)
    assert err.endswith("hidden_act='gelu' has no posgpt counterpart (posgpt takes 'silu')")
    (tmp_path / "parallel" / "model.safetensors").unlink()
    save_file({"x": torch.zeros(1)}, tmp_path / "parallel" / "model.safetensors")
    config = json.loads((tmp_path / "parallel" / "config.json").read_text())
    (tmp_path / "parallel" / "config.json").write_text(json.dumps(dict(config, use_parallel_residual=False)))
    err = one_line_error(export.main, ["--from=hf", str(tmp_path / "parallel"), f"--out={tmp_path / 'o4'}"], capsys)
    assert "the weights lack gpt_neox.embed_in.weight and 7 more" in err
    assert not any((tmp_path / o).exists() for o in ("o1", "o2", "o3", "o4"))


def test_imported_model_fine_tunes_with_train(tmp_path, tiny_data):
    hf = hf_neox(tmp_path / "hf", 0.25, vocab_size=34)    # the tiny dataset's 34 characters
    import_(tmp_path / "hf", tmp_path / "out")
    run_py("train.py", f"--out_dir={tmp_path / 'out'}", f"--data_dir={tiny_data}", "--dataset=tiny",
           "--init_from=resume", "--n_layer=2", "--n_head=4", "--n_embd=32", "--bias=True", "--block_size=16",
           "--rotary_fraction=0.25", "--max_iters=3", "--eval_interval=3", "--eval_iters=1", "--batch_size=4",
           "--device=cpu")
    tuned = checkpoint.load(tmp_path / "out")
    assert tuned["iter_num"] == 3 and "rng" in tuned
    assert not torch.equal(tuned["model"]["wte.weight"], hf.state_dict()["gpt_neox.embed_in.weight"])   # it trained


def test_llama_block_trained_by_train_py_exports_to_llama(tmp_path, tiny_data):
    """The block keys on the command line: a few steps of a Llama-style model, its checkpoint sampled
    from and run by transformers' Llama with the same logits."""
    out = tmp_path / "out"
    run_py("train.py", f"--out_dir={out}", f"--data_dir={tiny_data}", "--dataset=tiny", "--n_layer=2", "--n_head=4",
           "--n_embd=32", "--block_size=16", "--norm=rmsnorm", "--mlp=swiglu", "--mlp_hidden=48", "--n_kv_head=1",
           "--tie_embeddings=False", "--max_iters=3", "--eval_interval=3", "--eval_iters=1", "--batch_size=4",
           "--device=cpu")
    model = checkpoint.load_model(out)[0]
    assert model.config.n_kv_head == 1 and model.h[0].attn.c_attn.weight.shape == (32 + 2 * 8, 32)
    r = run_py("sample.py", f"--out_dir={out}", "--start=All:", "--max_new_tokens=5", "--device=cpu")
    assert r.stdout.startswith("All:")
    export.main([str(out), "--to=hf", f"--out={tmp_path / 'hf'}"])
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == "LlamaForCausalLM" and hf.config.num_key_value_heads == 1
    assert logits_diff(hf, model, torch.randint(0, 34, (2, 16))) <= 1e-4


def test_a_trained_bpe_goes_along_and_comes_back(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    tok.train_from_iterator([TINY_TEXT], trainers.BpeTrainer(vocab_size=V, special_tokens=["<|endoftext|>"],
                                                            show_progress=False))
    posgpt_run(tmp_path / "run")
    ckpt = checkpoint.load(tmp_path / "run")
    ckpt["tokenizer"] = {"tokenizer": "bpe", "tokenizer_json": tok.to_str(), "vocab_size": V, "eot": 0}
    checkpoint.save(ckpt, checkpoint.path_in(tmp_path / "run"))
    export.main([str(tmp_path / "run"), "--to=hf", f"--out={tmp_path / 'hf'}"])
    encode, decode, _ = tokenizer_from(ckpt["tokenizer"])
    text = "To be, or not to be: that is the question."
    hf_tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    ids = encode(text)   # V ids: characters the small vocabulary lacks are dropped, by both sides alike
    assert len(ids) > 10 and hf_tok(text)["input_ids"] == ids and hf_tok.decode(ids) == decode(ids)
    import_(tmp_path / "hf", tmp_path / "back")
    back = checkpoint.load(tmp_path / "back")["tokenizer"]
    assert back["tokenizer_json"] == ckpt["tokenizer"]["tokenizer_json"] and back["eot"] == 0
