"""Sample from a trained checkpoint, streaming text as it is generated.

    python sample.py --out_dir=out-rope --start="ROMEO:" --max_new_tokens=2000
    python sample.py --out_dir=out-alibi --start=FILE:prompt.txt --num_samples=3 --temperature=0.8
    python sample.py --out_dir=out-rope --rope_scaling=yarn --rope_factor=4    # RoPE extension
    python sample.py --out_dir=out-alibi --window=256 --sinks=4 --max_new_tokens=100000
    python sample.py --out_dir=out-rope --max_new_tokens=2000 --window=0       # the raw model past its length
    python sample.py --out_dir=out-rope --num_samples=8 --batch=True --decode=graph   # 8 streams at once, CUDA graph

The model and tokenizer are the checkpoint's: only evaluation-time keys (config.EVAL_KEYS) may be
given. Past the training block_size every token attends to the last block_size tokens unless
--window is given (--window=0: the raw model). docs/sampling.md says more.
"""
import sys
import time

import torch

from training import checkpoint
from training.cli import autocast, check_lows, fail, help_text, parse, pick_device, pick_dtype
from training.config import ConfigError, eval_key
from training import cpu_threads
from training.aot import AheadOfTime
from generate import CUDAGraphStep, Decoder

DEFAULTS = {
    "out_dir": "out",             # the checkpoint's folder (ckpt.pt)
    "start": "\n",                # the prompt: text, or FILE:path
    "num_samples": 1,             # samples drawn, one after the other (streamed), or together with --batch
    "batch": False,               # decode the num_samples samples together as one batch (each printed when done)
    "decode": "static",           # static: the static step (or --compile/--aot); graph: it in a CUDA graph (CUDA)
    "max_new_tokens": 500,        # tokens generated per sample
    "temperature": 0.8,           # < 1: sharper, > 1: flatter next-token distribution
    "top_k": 200,                 # sample among the k likeliest tokens
    "seed": 1337,                 # the sampling generator's seed
    "device": "auto",             # auto: cuda, then mps, then cpu
    "dtype": "auto",              # auto: bfloat16 on CUDA where supported, else float32
    "compile": False,             # compile the decoding step (torch.compile)
    "aot": False,                 # compile it ahead of time instead (training/aot.py: no per-token dynamo overhead)
    "threads": 0,                 # CPU threads; 0: training/cpu_threads.py's DECODE_THREADS (or OMP_NUM_THREADS)
}
USAGE = "python sample.py --out_dir=DIR [--key=value ...]"


def parse_args(argv):
    """-> (options, model overrides)."""
    doc = lambda: help_text(__doc__, USAGE, DEFAULTS, [sys.modules[__name__]], eval_keys=True)  # noqa: E731
    args, overrides, _ = parse(argv, DEFAULTS, lambda k, v: eval_key(k, v, DEFAULTS), doc=doc)
    check_lows(args, {"max_new_tokens": 0, "num_samples": 1, "threads": 0})
    if args["decode"] not in ("static", "graph"):
        raise ConfigError(f"--decode must be static or graph (a CUDA graph of the static step), got {args['decode']!r}")
    if args["decode"] == "graph" and (args["compile"] or args["aot"]):
        raise ConfigError("--decode=graph captures the eager static step; drop --compile/--aot, or use --decode=static")
    return args, overrides


def fit_window(model, ckpt, overrides, total, device):
    """(model, note): past the training length the model is rebuilt with window = the training
    block_size unless the user chose a window (--window=0: none); note says so, or is None."""
    trained, limit = ckpt["model_args"]["block_size"], model.max_positions
    if limit is not None and total > limit:
        return model, (f"[{model.pos_name} knows only {limit} positions: past them, each token is predicted from "
                       f"the last {limit} tokens, re-encoded at positions 0..{limit - 1} (no KV cache)]")
    if total <= trained or model.config.window or model.config.layer_windows:
        return model, None
    raw = (f"[going past the training length ({trained} tokens) without a window, as asked: distances past it "
           f"were never trained (docs/extrapolation.md); --window={trained} keeps them in range]")
    if "window" in overrides:  # --window=0: the raw model, as asked
        return model, raw
    try:
        windowed = checkpoint.build_model(ckpt, dict(overrides, window=trained), device)
    except ValueError:  # this model takes no window (linear attention): the raw model
        return model, raw
    return windowed, (f"[past the training length ({trained} tokens) each token attends to the last {trained} "
                      f"(--window={trained}), so every distance stays in the trained range; --window=0 for the "
                      f"raw model]")


def streamer(decode, out):
    """on_token for generate: writes each token's text once whole; a byte-level token that ends inside
    a UTF-8 character (decoded as U+FFFD) waits, up to 4 of them, for the rest of it."""
    pending = []

    def write(tok):
        pending.append(tok)
        text = decode(pending)
        if not text.endswith("\ufffd") or len(pending) >= 4:
            out.write(text)
            out.flush()
            pending.clear()
    return write


def read_prompt(start):
    """--start's text: itself, or the contents of the file named after FILE: (a one-line error naming the flag)."""
    if not start.startswith("FILE:"):
        return start
    try:
        with open(start[5:], encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise ConfigError(f"--start={start}: cannot read {start[5:]!r} ({why}); give a readable UTF-8 file after "
                          f"FILE:, or the prompt itself as --start=TEXT") from None


def main(argv):
    try:
        args, overrides = parse_args(argv)
        device = pick_device(args["device"])
        if args["decode"] == "graph" and not device.startswith("cuda"):
            raise ConfigError(f"--decode=graph needs CUDA (the device is {device}); use --decode=static")
        dtype = pick_dtype(args["dtype"], device.split(":")[0])
        ckpt = checkpoint.load(args["out_dir"])
        encode, decode, _ = checkpoint.tokenizer_of(ckpt)
        start = read_prompt(args["start"])
        ids = encode(start)
        if not ids:
            raise ConfigError("the prompt encodes to no tokens; give --start some text")
        model = checkpoint.build_model(ckpt, overrides, device)
        model, note = fit_window(model, ckpt, overrides, len(ids) + args["max_new_tokens"], device)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        fail(e)
    if note:
        print(note, file=sys.stderr)
    threads = cpu_threads.choose(args["threads"], device, default=cpu_threads.DECODE_THREADS)
    graph = args["decode"] == "graph"
    decoder = Decoder(model, compile=CUDAGraphStep if graph else AheadOfTime if args["aot"] else args["compile"])
    if (args["compile"] or args["aot"] or graph) and not decoder.compile:
        print("[--compile/--aot/--decode=graph: this model's decode step needs host work per token (static_decoding "
              "is False for its encoding or attention); decoding runs eager]", file=sys.stderr)
    x = torch.tensor(ids, dtype=torch.long, device=device)[None]                  # (1, T)
    t = time.perf_counter()
    with autocast(device, dtype):
        draw(decoder, x, args, start, decode, device)
    n, seconds = args["num_samples"] * args["max_new_tokens"], time.perf_counter() - t
    how = ("CUDA-graph static step" if graph and decoder.compiled_steps else
           "compiled static step" if decoder.compiled_steps else "static step" if decoder.static
           else "reference step (an encoding needs host work per token)")
    if decoder.compiled_steps and not graph:
        how += (f", {decoder.compiled_steps} compiled steps (the first, which compiles, took "
                f"{decoder.first_step_s:.2f} s)")
    how += f", {args['num_samples']} streams as one batch" if args["batch"] else ""
    how += f"; {threads}" if threads else ""
    print(f"[{n} tokens in {seconds:.2f} s: {n / max(seconds, 1e-9):.1f} tokens/s; {how}]", file=sys.stderr)


def draw(decoder, x, args, start, decode, device):
    """Writes the num_samples samples continuing x (1, T): one after the other, each streamed as it is generated,
    or with --batch all of them decoded together as one batch of streams (B = num_samples), printed when done."""
    gen = torch.Generator(device=device).manual_seed(args["seed"])
    sep = "\n---------------\n"
    if args["batch"]:
        rows = x.expand(args["num_samples"], -1).contiguous()                  # (B, T): one prompt, B streams
        out = decoder.generate(rows, args["max_new_tokens"], args["temperature"], args["top_k"], gen)
        for row in out[:, x.shape[1]:].tolist():
            sys.stdout.write(start + decode(row) + sep)
        sys.stdout.flush()
        return
    printer = streamer(decode, sys.stdout)
    for _ in range(args["num_samples"]):  # one at a time, so that each streams as it is written
        sys.stdout.write(start)
        decoder.generate(x, args["max_new_tokens"], args["temperature"], args["top_k"], gen, on_token=printer)
        sys.stdout.write(sep)
        sys.stdout.flush()

if __name__ == "__main__":
    main(sys.argv[1:])
