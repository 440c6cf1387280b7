"""Benchmark every positional encoding on this machine; print a table per section, with --json=PATH also a JSON file
(docs/speed.md's tables are generated from such files).

    python bench.py                                  # the default config (configs/base.py shape)
    python bench.py --sections=train --block_size=256 --batch_size=16 --threads=1
    python bench.py --sections=decode --decode_threads=1,2 --rounds=3 --nanogpt=/path/to/nanoGPT
    python bench.py --sections=long --long_lengths=4096,16384 --threads=1

Sections (--sections=train,eval,decode,long,train_memory; train and eval by default):
  train  a training step per encoding, alternating over --rounds rounds: the median, tokens/s, the
         ratio to `none`, and the median CPU time (with --threads=1 the steadiest ratio when shared)
  train_memory  the peak memory of one training step per encoding (one model at a time, after a warm-up step)
  eval   a no-grad forward pass of --batch_size sequences at 1x, 4x and 16x block_size
  decode tokens/s per encoding and --decode_shapes shape, nanoGPT beside it (measure/bench_decode.py)
  long   a no-grad forward with the loss of one sequence at each --long_lengths (tokens)
eval and long give seconds, tokens/s and the process's peak memory: its peak resident set
(VmHWM, reset before the pass; Linux), on CUDA its peak allocated. Timings on a shared machine
are noisy: compare ratios within one run.
"""
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace

import torch

import positional
from measure import bench_decode
from measure.bench_common import bench_forward, build, counts, peak_bytes, reset_peak, sync
from training.cli import autocast, fail, help_text, parse, pick_device, pick_dtype
from training.config import ConfigError

SECTIONS = ("train", "eval", "decode", "long", "train_memory")


def options():
    """bench.py's options and defaults (cli.py's convention: --key=value)."""
    names = ",".join(positional.REGISTRY)
    return dict(
        sections="train,eval",           # of train, eval, decode, long (the docstring says what each is)
        encodings=names,                 # the encodings timed by train, eval and long
        device="auto",                   # auto: cuda, then mps, then cpu
        dtype="auto",                    # autocast dtype: float32 or bfloat16; auto as train.py
        compile=False,                   # time each encoding compiled too (rows '+c'); compile the eval and long passes
        json="",                         # a path: also write the figures there as JSON; "": print the tables only
        decode_shapes="4x4x128:64,6x6x384:256",   # decode: model shapes, LxHxC:block
        decode_vocab=77,                 # decode: vocabulary size
        decode_encodings=names,          # the encodings timed by decode
        decode_threads="1",              # decode: thread counts, e.g. 1,2
        decode_compile=True,             # decode: also time the compiled static step (torch.compile and AOT)
        decode_window=0,                 # decode: every model attends to the last W tokens; 0: all
        nanogpt="",                      # decode: a nanoGPT checkout, timed side by side
        long_lengths="4096,16384,32768,65536",   # long: tokens of the one sequence
        long_kernel="",                  # long: the models' attention_kernel ("flex": FlexAttention on CPU too)
        n_layer=4,                       # model shape of train, eval and long
        n_head=4,                        # attention heads
        n_embd=128,                      # width
        block_size=128,                  # training length
        batch_size=32,                   # sequences per step
        vocab_size=65,                   # vocabulary size
        rounds=7,                        # train and decode: rounds alternating between encodings (the median is kept)
        steps=3,                         # train: steps per encoding per round
        gen_tokens=2000,                 # decode: tokens generated
        seed=1337,                       # model initialisation and sampling
        threads=0,                       # torch threads; 0: torch's default
    )


def parse_args(argv=None):
    """-> namespace of options."""
    doc = lambda: help_text(__doc__, "python bench.py [--key=value ...]", options(), [options])  # noqa: E731
    args = SimpleNamespace(**parse(sys.argv[1:] if argv is None else argv, options(), doc=doc)[0])
    args.device = pick_device(args.device)
    args.dtype = pick_dtype(args.dtype, args.device.split(":")[0])
    if args.dtype not in ("float32", "bfloat16"):
        raise ConfigError(f"--dtype must be auto, float32 or bfloat16, got {args.dtype!r}")
    for name in args.encodings.split(",") + args.decode_encodings.split(","):
        if name not in positional.REGISTRY:
            raise ConfigError(f"unknown encoding {name!r}; valid: {', '.join(positional.REGISTRY)}")
    if set(args.sections.split(",")) - set(SECTIONS):
        raise ConfigError(f"--sections={args.sections}: valid sections are {', '.join(SECTIONS)}")
    bench_decode.parse_shapes(args.decode_shapes)
    if args.decode_window < 0:
        raise ConfigError(f"--decode_window must be >= 0 (0: the whole text), got {args.decode_window}")
    counts("decode_threads", args.decode_threads)
    counts("long_lengths", args.long_lengths)
    return args


def bench_train(args):
    """{row: figures} of a training step (forward, backward, AdamW) per encoding, compiled too with --compile."""
    x, y = torch.randint(args.vocab_size, (2, args.batch_size, args.block_size),
                         generator=torch.Generator().manual_seed(args.seed)).to(args.device)
    runs = {}
    for name in args.encodings.split(","):
        for compiled in (False, True)[:1 + args.compile]:
            model = build(args, name, compiled)
            opt = model.configure_optimizers(0.1, 1e-4, (0.9, 0.99), args.device.split(":")[0])
            runs[name + " +c" * compiled] = model, opt
    times = {row: [] for row in runs}   # (wall, CPU) seconds per step, a pair per round
    for r in range(args.rounds + 1):  # round 0 warms up (and compiles)
        for row, (model, opt) in runs.items():
            sync(args.device)
            t, c = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                with autocast(args.device, args.dtype):
                    loss = model(x, y)[1]
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
            sync(args.device)
            if r:
                times[row].append(((time.perf_counter() - t) / args.steps, (time.process_time() - c) / args.steps))
    medians = {row: [statistics.median(ts) for ts in zip(*pairs)] for row, pairs in times.items()}
    base, base_cpu = medians["none" if "none" in runs else next(iter(runs))]
    tokens = args.batch_size * args.block_size
    return {row: dict(ms=dt * 1e3, tokens_per_s=tokens / dt, ratio_to_none=dt / base, cpu_ms=c * 1e3,
                      cpu_ratio_to_none=c / base_cpu) for row, (dt, c) in medians.items()}


def bench_train_memory(args):
    """{encoding: {peak_bytes, s}} of one training step (forward, backward, AdamW) at block_size, batch_size,
    each encoding's model alone in memory, measured after a warm-up step (AdamW's state exists)."""
    x, y = torch.randint(args.vocab_size, (2, args.batch_size, args.block_size),
                         generator=torch.Generator().manual_seed(args.seed)).to(args.device)
    out = {}
    for name in args.encodings.split(","):
        model = build(args, name, args.compile)
        opt = model.configure_optimizers(0.1, 1e-4, (0.9, 0.99), args.device.split(":")[0])
        try:
            for warm in (True, False):
                if not warm:
                    reset_peak(args.device)
                    sync(args.device)
                    t = time.perf_counter()
                with autocast(args.device, args.dtype):
                    loss = model(x, y)[1]
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            sync(args.device)
            out[name] = dict(s=time.perf_counter() - t, peak_bytes=peak_bytes(args.device))
        except Exception as e:   # noqa: BLE001  recorded, and the other encodings go on (a GPU run is not repeated)
            out[name] = dict(error=f"{type(e).__name__}: {str(e).strip()[:300]}")
            print(f"  {name}: failed, {out[name]['error'][:120]}", flush=True)
        del model, opt
    return out


def train_memory_table(r, args):
    lines = [f"\ntraining step peak memory: {args.n_layer}L {args.n_head}H {args.n_embd}C, block {args.block_size}, "
             f"batch {args.batch_size}", f"{'encoding':<18}{'peak MiB':>10}{'vs rope':>9}{'seconds':>9}"]
    ok = {name: f for name, f in r.items() if "error" not in f}
    base = ok.get("rope", next(iter(ok.values()), {"peak_bytes": 1}))["peak_bytes"]
    for name, f in r.items():
        lines.append(f"{name:<18}  failed: {f['error'][:80]}" if "error" in f else
                     f"{name:<18}{f['peak_bytes'] / 2 ** 20:10.0f}{f['peak_bytes'] / base:9.2f}{f['s']:9.2f}")
    return lines


def train_table(r, args):
    lines = [f"\ntraining step: {args.n_layer}L {args.n_head}H {args.n_embd}C, block {args.block_size}, "
             f"batch {args.batch_size}, median of {args.rounds} rounds x {args.steps} steps",
             f"{'encoding':<18}{'ms/step':>9}{'tok/s':>10}{'vs none':>9}{'CPU ms':>9}{'vs none':>9}"]
    for name, f in r.items():
        lines.append(f"{name:<18}{f['ms']:9.1f}{f['tokens_per_s']:10.0f}{f['ratio_to_none']:9.2f}"
                     f"{f['cpu_ms']:9.1f}{f['cpu_ratio_to_none']:9.2f}")
    return lines


def forward_table(r, title):
    lengths = sorted({T for f in r.values() for T in f})
    lines = [f"\n{title}: seconds, tokens/s, process peak MiB",
             f"{'encoding':<16}" + "".join(f"{T:>26}" for T in lengths)]
    for name, f in r.items():
        cells = [f"{c['s']:.2f} s {c['tokens_per_s']:7.0f} {c['peak_bytes'] / 2 ** 20:6.0f}" if c else "n/a"
                 for c in (f.get(T) for T in lengths)]
        lines.append(f"{name:<16}" + "".join(f"{c:>26}" for c in cells))
    return lines


def main(argv=None):
    try:
        args = parse_args(argv)
        nanogpt = bench_decode.load_nanogpt(args.nanogpt) if args.nanogpt else None
    except ValueError as e:
        fail(e)
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {"args": vars(args), "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                                               "cpus": os.cpu_count(), "device": args.device,
                                               "name": bench_decode.machine_name(args.device)}}
    print(f"machine: {results['machine']['name']}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    shape = f"{args.n_layer}L {args.n_head}H {args.n_embd}C"
    sections = {   # section -> (its figures, the lines of its table)
        "train": (lambda: bench_train(args), lambda r: train_table(r, args)),
        "eval": (lambda: bench_forward(args, args.batch_size, [m * args.block_size for m in (1, 4, 16)]),
                 lambda r: forward_table(r, f"evaluation forward, {shape}, batch {args.batch_size}")),
        "decode": (lambda: bench_decode.bench_decode(args, nanogpt), lambda r: bench_decode.table(r, args)),
        "long": (lambda: bench_forward(args, 1, counts("long_lengths", args.long_lengths), True, args.long_kernel),
                 lambda r: forward_table(r, f"long evaluation forward, {shape}, 1 sequence")),
        "train_memory": (lambda: bench_train_memory(args), lambda r: train_memory_table(r, args))}
    for name, (run, table) in sections.items():
        if name in args.sections.split(","):
            results[name] = run()
            print("\n".join(table(results[name])), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
        print(f"\nfigures written to {args.json}")


if __name__ == "__main__":
    main()
