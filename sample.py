"""Sample from a trained checkpoint, streaming text as it is generated.

    python sample.py --out_dir=out-rope --start="ROMEO:" --max_new_tokens=2000
    python sample.py --out_dir=out-alibi --start=FILE:prompt.txt --num_samples=3 --temperature=0.8

    python sample.py --out_dir=out-rope --rope_scaling=yarn --rope_factor=4    # RoPE extension
    python sample.py --out_dir=out-alibi --window=256 --sinks=4 --max_new_tokens=100000

Generation uses the KV cache and goes past the training block_size for every encoding:
relative encodings keep attending with growing positions; an encoding with a position
table (`learned`) re-encodes a sliding window of its last block_size tokens instead.
Any model key may be overridden (rope_scaling and its knobs, window, sinks). With a
window the KV cache is bounded (cache.WindowKVCache): it keeps the sinks and the last
window keys at their original positions, so memory is constant however long the text.
"""
import dataclasses
import difflib
import os
import sys
from contextlib import nullcontext

import torch

import checkpoint
from config import SETTINGS, ConfigError, coerce, model_config, parse_override
from data.tokenizer import load_tokenizer
from model import GPT, GPTConfig

GPT_KEYS = [f.name for f in dataclasses.fields(GPTConfig)]
DEFAULTS = dict(out_dir="out", start="\n", num_samples=1, max_new_tokens=500, temperature=0.8, top_k=200,
                seed=1337, device="auto", dtype="float32", compile=False)


def parse_args(argv):
    args = dict(DEFAULTS)
    model_overrides = {}
    for arg in argv:
        key, value = parse_override(arg)
        if key in DEFAULTS:
            want = type(DEFAULTS[key])
            if want is str:
                value = arg.split("=", 1)[1]  # keep the raw text: --start=123 is the prompt "123"
            elif want is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, want) or (want is int and isinstance(value, bool)):
                raise ConfigError(f"--{key} wants a {want.__name__}, got {value!r}")
            args[key] = value
        elif key in GPT_KEYS or key in SETTINGS:  # model keys that may change at sampling time (window, sinks, ...)
            model_overrides[key] = coerce(key, value)
        else:
            close = difflib.get_close_matches(key, [*DEFAULTS, *GPT_KEYS, *SETTINGS], n=1)
            hint = f"did you mean --{close[0]}?" if close else f"valid: {', '.join(DEFAULTS)} and model keys"
            raise ConfigError(f"unknown argument --{key}; {hint}")
    if args["max_new_tokens"] < 0:
        raise ConfigError(f"--max_new_tokens must be >= 0, got {args['max_new_tokens']}")
    if args["num_samples"] < 1:
        raise ConfigError(f"--num_samples must be >= 1, got {args['num_samples']}")
    return args, model_overrides


def load_model(out_dir, overrides=None, device="cpu"):
    """Rebuild the model from its checkpoint alone; `overrides` may change inference-time keys."""
    if "window" in (overrides or {}) and overrides["window"] < 1:
        raise ConfigError(f"--window must be >= 1 (the number of most recent keys each query sees), "
                          f"got {overrides['window']}")
    ckpt = checkpoint.load(out_dir)
    model = GPT(model_config(ckpt["model_args"], overrides))
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:  # an override changed a weight shape (n_layer, n_embd, ...)
        raise ConfigError(f"the checkpoint's weights do not fit the model with {overrides}: "
                          f"{str(e).splitlines()[1].strip()}; drop the overrides that change shapes") from None
    return model.to(device).eval(), ckpt


def meta_path_of(cfg):
    path = os.path.join(cfg.get("data_dir", "data"), cfg.get("dataset", ""), "meta.pkl")
    return path if os.path.exists(path) else None


def main(argv):
    try:
        args, overrides = parse_args(argv)
        device = args["device"] if args["device"] != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        model, ckpt = load_model(args["out_dir"], overrides, device)
        encode, decode, _ = load_tokenizer(meta_path_of(ckpt["config"]))
        start = args["start"]
        if start.startswith("FILE:"):
            with open(start[5:], encoding="utf-8") as f:
                start = f.read()
        ids = encode(start)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    if not ids:
        print("error: the prompt encodes to no tokens; give --start some text", file=sys.stderr)
        sys.exit(2)

    limit = model.pe.max_positions
    if limit is not None and len(ids) + args["max_new_tokens"] > limit:
        print(f"[{model.pe.name} knows only {limit} positions: past them, each token is predicted from the "
              f"last {limit} tokens, re-encoded at positions 0..{limit - 1} (no KV cache)]", file=sys.stderr)
    elif not model.config.window and len(ids) + args["max_new_tokens"] > model.config.block_size:
        trained = ckpt["model_args"]["block_size"]
        print(f"[going past the training length ({trained} tokens): encodings that do not extrapolate degrade "
              f"there (README: Length extrapolation); --window={trained} keeps every distance in the trained "
              f"range]", file=sys.stderr)
    if args["compile"]:
        model = torch.compile(model)
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args["dtype"]]
    ctx = nullcontext() if ptdtype == torch.float32 else torch.autocast(device_type=device.split(":")[0], dtype=ptdtype)
    gen = torch.Generator(device=device).manual_seed(args["seed"])
    x = torch.tensor(ids, dtype=torch.long, device=device)[None]                  # (1, T)
    printer = lambda tok: (sys.stdout.write(decode([tok])), sys.stdout.flush())
    with ctx:
        for _ in range(args["num_samples"]):  # one at a time, so that each streams as it is written
            sys.stdout.write(start)
            model.generate(x, args["max_new_tokens"], args["temperature"], args["top_k"], gen, on_token=printer)
            sys.stdout.write("\n---------------\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
