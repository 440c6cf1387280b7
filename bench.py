"""Benchmark every positional encoding on this machine; print one table, write JSON (docs/speed.md).

    python bench.py                                  # the default config (configs/base.py shape)
    python bench.py --block_size=256 --batch_size=16 --sections=train
    python bench.py --sections=gen --block_size=256 --gen_tokens=2000
    python bench.py --sections=eval --n_layer=6 --n_head=6 --n_embd=384 --block_size=256 --batch_size=1
    python bench.py --sections=decode --decode_threads=1,2 --rounds=3 --nanogpt=/path/to/nanoGPT
    python bench.py --sections=long --long_lengths=4096,16384 --threads=1

Sections (--sections=peak,train,gen,eval,decode,long; all but decode and long by default):
  peak   the machine's float32 matrix-multiply peak, measured here (MFU means something on a CPU)
  train  one training step per encoding (and --variants), alternating over --rounds rounds: the
         median, tokens/s, the ratio to `none`, FLOP/s and MFU, the best round, and the median
         CPU time per step (with --threads=1 the steadiest ratio on a shared machine)
  gen    tokens/s generating with the KV cache against recomputing the context, same seed
  eval   time and peak memory of one no-grad forward pass at 1x, 4x and 16x block_size
  decode tokens/s per encoding and --decode_shapes shape, nanoGPT's generate beside it
         (measure/bench_decode.py)
  long   one no-grad forward with the loss of one sequence at each --long_lengths (tokens), per
         encoding: seconds, tokens/s and the process's peak resident set (CUDA: peak allocated);
         --long_kernel=flex asks for FlexAttention on CPU too (model.py's kernels)

Timings on a shared machine are noisy: compare ratios within one run. FLOPs follow
nanoGPT/PaLM: 6N per token plus 12 * L * C * T for attention (training), a third for a forward.
"""
import ctypes
import dataclasses
import gc
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace

import torch
from torch.nn import functional as F

import positional
from measure import bench_decode
from training.cli import autocast, fail, help_text, parse, pick_device, pick_dtype
from training.config import ConfigError, coerce, parse_override
from model import GPT, GPTConfig


def relative_encodings():
    """Encodings with no position table (they generate past block_size with the cache)."""
    tiny = dict(n_layer=1, n_head=2, n_embd=8, block_size=8, vocab_size=8)
    return [n for n in positional.REGISTRY if n != "none"
            and positional.build(GPTConfig(pos_encoding=n, **tiny)).max_positions is None]


def options():
    """bench.py's options and defaults (cli.py's convention: --key=value)."""
    names = ",".join(positional.REGISTRY)
    return dict(
        sections="peak,train,gen,eval",   # of peak, train, gen, eval, decode (the docstring says what each is)
        encodings=names,                 # the encodings timed by train and eval
        variants="",                     # more train rows: "rope:qk_norm=True;rope:window=32" (';' between rows)
        gen_encodings=",".join(relative_encodings()),   # the encodings timed by gen
        eval_lengths="1,4,16",           # eval: lengths, in multiples of block_size
        device="auto",                   # auto: cuda, then mps, then cpu
        dtype="auto",                    # autocast dtype: float32 or bfloat16; auto as train.py
        compile=False,                   # also time each encoding compiled (rows '+c'); compile the eval pass
        json="bench.json",               # where the figures are written
        decode_shapes="4x4x128:64,6x6x384:256",   # decode: model shapes, LxHxC:block
        decode_vocab=77,                 # decode: vocabulary size
        decode_encodings=names,          # the encodings timed by decode
        decode_threads="1",              # decode: thread counts, e.g. 1,2
        decode_compile=True,             # decode: also time the compiled static step
        decode_window=0,                 # decode: every model attends to the last W tokens; 0: all
        nanogpt="",                      # decode: a nanoGPT checkout, timed side by side
        long_lengths="4096,16384,32768,65536",   # long: tokens of the one sequence
        long_kernel="",                  # long: the models' attention_kernel ("flex": FlexAttention on CPU too)
        n_layer=4,                       # model shape of train, gen and eval
        n_head=4,                        # attention heads
        n_embd=128,                      # width
        block_size=128,                  # training length
        batch_size=32,                   # sequences per step
        vocab_size=65,                   # vocabulary size
        rounds=7,                        # train: rounds alternating between encodings (the median is kept)
        steps=3,                         # train: steps per encoding per round
        gen_tokens=2000,                 # gen and decode: tokens generated
        seed=1337,                       # model initialisation and sampling
        threads=0,                       # torch threads; 0: torch's default
    )


def parse_args(argv=None):
    """-> namespace of options."""
    doc = lambda: help_text(__doc__, "python bench.py [--key=value ...]", options(), [options])  # noqa: E731
    opts, _, _ = parse(sys.argv[1:] if argv is None else argv, options(), doc=doc)
    args = SimpleNamespace(**opts)
    args.device = pick_device(args.device)
    args.dtype = pick_dtype(args.dtype, args.device.split(":")[0])
    if args.dtype not in ("float32", "bfloat16"):
        raise ConfigError(f"--dtype must be auto, float32 or bfloat16, got {args.dtype!r}")
    for name in args.encodings.split(",") + args.gen_encodings.split(",") + args.decode_encodings.split(","):
        if name not in positional.REGISTRY:
            raise ConfigError(f"unknown encoding {name!r}; valid: {', '.join(positional.REGISTRY)}")
    args.variant_configs = variant_configs(args.variants)
    unknown = set(args.sections.split(",")) - {"peak", "train", "gen", "eval", "decode", "long"}
    if unknown:
        raise ConfigError(f"unknown section(s) {', '.join(sorted(unknown))}; valid: peak, train, gen, eval, decode, long")
    bench_decode.parse_shapes(args.decode_shapes)
    if args.decode_window < 0:
        raise ConfigError(f"--decode_window must be >= 0 (0: the whole text), got {args.decode_window}")
    threads = args.decode_threads.split(",")
    if not all(t.strip().isdigit() and int(t) > 0 for t in threads):
        raise ConfigError(f"--decode_threads must be thread counts > 0, e.g. 1,2; got {args.decode_threads!r}")
    return args


def variant_configs(spec):
    """--variants: extra training-step rows, each an encoding with model options, separated by ';'
    (option patterns keep their commas): "rope:qk_norm=True;rope:layer_encodings=rope,none&layer_windows=32,0"
    -> {row name: (encoding, {option: value})}, each value typed as its GPTConfig field."""
    types = {f.name for f in dataclasses.fields(GPTConfig)}
    out = {}
    for entry in filter(None, (e.strip() for e in spec.split(";"))):
        pos, _, opts = entry.partition(":")
        if pos not in positional.REGISTRY:
            raise ConfigError(f"--variants entry {entry!r}: unknown encoding {pos!r}; write ENCODING:key=value&...")
        overrides = {}
        for kv in filter(None, opts.split("&")):
            key, value = parse_override(f"--{kv}")
            value = kv.partition("=")[2] if isinstance(getattr(GPTConfig, key, None), str) else value  # "32,0" stays
            if key not in types or key in ("pos_encoding", "n_layer", "n_head", "n_embd", "block_size"):
                raise ConfigError(f"--variants entry {entry!r}: {key!r} is not a model option bench varies")
            try:
                overrides[key] = coerce(key, value)   # typed as every command line types it: 'ture' is refused
            except ConfigError as e:
                raise ConfigError(f"--variants entry {entry!r}: {e}") from None
        out[entry] = (pos, overrides)
    return out


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def build(args, pos, compile=False, overrides=None):
    torch.manual_seed(args.seed)
    cfg = GPTConfig(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size,
                    vocab_size=args.vocab_size, pos_encoding=pos, dropout=0.0, bias=False, **(overrides or {}))
    model = GPT(cfg).to(args.device)
    return (torch.compile(model) if compile else model), model


def matmul_peak(device, n=1024, reps=10):
    """Best float32 matmul FLOP/s over reps (n x n) @ (n x n) products."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    best = float("inf")
    for _ in range(reps):
        sync(device)
        t = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def flops_per_token(model, T, train=True):
    cfg = model.config
    fwd_bwd = 6 * model.get_num_params() + 12 * cfg.n_layer * cfg.n_embd * T
    return fwd_bwd if train else fwd_bwd / 3


def bench_train(args, peak):
    names = args.encodings.split(",")
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randint(args.vocab_size, (args.batch_size, args.block_size), generator=gen).to(args.device)
    y = torch.randint(args.vocab_size, (args.batch_size, args.block_size), generator=gen).to(args.device)
    runs = {}
    rows = {**{name: (name, {}) for name in names}, **args.variant_configs}   # row -> (encoding, model options)
    for name, (pos, overrides) in rows.items():
        for compiled in (False, True) if args.compile else (False,):
            model, raw = build(args, pos, compiled, overrides)
            opt = raw.configure_optimizers(0.1, 1e-4, (0.9, 0.99), args.device.split(":")[0])
            runs[name + " +c" * compiled] = (model, raw, opt)
    names = list(runs)

    def step(model, opt):
        with autocast(args.device, args.dtype):
            _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    times = {name: [] for name in names}
    cpu_times = {name: [] for name in names}
    peaks = [peak] if peak else []
    for r in range(args.rounds + 1):  # round 0 warms up (and compiles)
        if peak:  # the peak is re-measured every round, between the same encodings
            peaks.append(matmul_peak(args.device))
        for name in names:
            model, _, opt = runs[name]
            sync(args.device)
            t, c = time.perf_counter(), time.process_time()
            for _ in range(args.steps):
                step(model, opt)
            sync(args.device)
            if r:
                times[name].append((time.perf_counter() - t) / args.steps)
                cpu_times[name].append((time.process_time() - c) / args.steps)
    tokens = args.batch_size * args.block_size
    first = "none" if "none" in times else names[0]
    best_base, cpu_base = min(times[first]), statistics.median(cpu_times[first])
    peak = max(peaks) if peaks else None
    out = {}
    for name in names:
        dt = statistics.median(times[name])
        flops = flops_per_token(runs[name][1], args.block_size) * tokens / dt
        cpu = statistics.median(cpu_times[name])
        out[name] = dict(ms=dt * 1e3, tokens_per_s=tokens / dt, ratio_to_none=dt / statistics.median(times[first]),
                         cpu_ms=cpu * 1e3, cpu_ratio_to_none=cpu / cpu_base, flops=flops,
                         mfu=flops / peak if peak else None, best_ms=min(times[name]) * 1e3,
                         best_ratio_to_none=min(times[name]) / best_base, all_ms=[t * 1e3 for t in times[name]])
    return out, peak


@torch.no_grad()
def recompute_generate(model, idx, n, gen):
    """nanoGPT's way: the whole context (cropped to a position table) through the model
    for every new token."""
    limit = model.max_positions
    for _ in range(n):
        logits, _ = model(idx if limit is None else idx[:, -limit:])
        nxt = torch.multinomial(F.softmax(logits[:, -1, :], dim=-1), 1, generator=gen)
        idx = torch.cat((idx, nxt), dim=1)
    return idx


def bench_gen(args):
    out = {}
    for name in args.gen_encodings.split(","):
        _, model = build(args, name)  # generate() is eager: its shapes change every step
        model.eval()
        prompt = torch.zeros(1, 1, dtype=torch.long, device=args.device)
        res = {}
        texts = {}
        for mode in ("cache", "recompute"):
            gen = torch.Generator(device=args.device).manual_seed(args.seed)
            sync(args.device)
            t = time.perf_counter()
            with autocast(args.device, args.dtype):
                if mode == "cache":
                    texts[mode] = model.generate(prompt, args.gen_tokens, generator=gen)
                else:
                    texts[mode] = recompute_generate(model, prompt, args.gen_tokens, gen)
            sync(args.device)
            res[f"{mode}_tokens_per_s"] = args.gen_tokens / (time.perf_counter() - t)
        res["speedup"] = res["cache_tokens_per_s"] / res["recompute_tokens_per_s"]
        res["same_text"] = bool(torch.equal(texts["cache"], texts["recompute"]))
        out[name] = res
    return out


def _rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def measure_pass(fn, device):
    """(seconds, peak bytes) of fn(). CUDA: max_memory_allocated; CPU (Linux): the growth of the
    peak resident set (VmHWM, reset through /proc/self/clear_refs, after malloc_trim)."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        try:  # hand freed heap pages back to the OS, so the pass's allocations show in the peak
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except OSError:
            pass
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM, the peak resident set
        except OSError:
            pass
        before = _rss_kib("VmRSS")
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    dt = time.perf_counter() - t
    if device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated() - before
    else:
        hwm = _rss_kib("VmHWM")
        peak = (hwm - before) * 1024 if hwm is not None and before is not None else None
    return dt, peak


def bench_eval(args):
    out = {}
    mults = [int(m) for m in args.eval_lengths.split(",")]
    for name in args.encodings.split(","):
        model, raw = build(args, name, args.compile)
        raw.eval()
        res = {}
        for m in mults:
            T = m * args.block_size
            if raw.max_positions is not None and T > raw.max_positions:
                res[f"{m}x"] = None  # a position table ends at block_size
                continue
            idx = torch.randint(args.vocab_size, (args.batch_size, T), device=args.device)
            with torch.no_grad(), autocast(args.device, args.dtype):
                model(idx[:, :args.block_size])  # warm up
                dt, peak = measure_pass(lambda: model(idx), args.device)
            res[f"{m}x"] = dict(T=T, s=dt, peak_bytes=peak)
        out[name] = res
    return out


def bench_long(args):
    """{encoding: {T: {s, tokens_per_s, peak_bytes}}}: one sequence, evaluation forward with the loss."""
    out = {}
    for name in args.encodings.split(","):
        model = build(args, name, overrides={"attention_kernel": args.long_kernel})[1].eval()
        out[name] = {}
        for T in [int(t) for t in args.long_lengths.split(",")]:
            if model.max_positions is not None and T > model.max_positions:
                continue  # a position table ends at block_size
            idx = torch.randint(args.vocab_size, (1, T + 1), device=args.device)
            with torch.no_grad(), autocast(args.device, args.dtype):
                model(idx[:, :-1] if args.long_kernel else idx[:, :64])  # warm up (FlexAttention compiles per length)
                dt, _ = measure_pass(lambda: model(idx[:, :-1], idx[:, 1:]), args.device)
            peak = torch.cuda.max_memory_allocated() if args.device.startswith("cuda") else _rss_kib("VmHWM") * 1024
            out[name][T] = dict(s=dt, tokens_per_s=T / dt, peak_bytes=peak)
    return out


def table(results, args):
    lines = []
    if results.get("peak"):
        lines.append(f"matmul peak (float32): {results['peak'] / 1e9:.1f} GFLOP/s")
    if "train" in results:
        lines.append(f"\ntraining step: {args.n_layer}L {args.n_head}H {args.n_embd}C, block {args.block_size}, "
                     f"batch {args.batch_size}, median of {args.rounds} rounds x {args.steps} steps")
        w = max(16, *(len(name) + 2 for name in results["train"]))   # --variants rows have long names
        lines.append(f"{'encoding':<{w}}{'ms/step':>9}{'tok/s':>10}{'vs none':>9}{'GFLOP/s':>9}{'MFU':>7}"
                     f"{'best ms':>9}{'vs none':>9}{'CPU ms':>9}{'vs none':>9}")
        for name, r in results["train"].items():
            mfu = f"{r['mfu'] * 100:6.1f}%" if r["mfu"] else "      -"
            lines.append(f"{name:<{w}}{r['ms']:9.1f}{r['tokens_per_s']:10.0f}{r['ratio_to_none']:9.2f}"
                         f"{r['flops'] / 1e9:9.1f}{mfu:>7}{r['best_ms']:9.1f}{r['best_ratio_to_none']:9.2f}"
                         f"{r['cpu_ms']:9.1f}{r['cpu_ratio_to_none']:9.2f}")
    if "gen" in results:
        lines.append(f"\ngeneration of {args.gen_tokens} tokens (batch 1, block {args.block_size})")
        lines.append(f"{'encoding':<16}{'cache tok/s':>12}{'recompute':>11}{'speedup':>9}  same text")
        for name, r in results["gen"].items():
            lines.append(f"{name:<16}{r['cache_tokens_per_s']:12.1f}{r['recompute_tokens_per_s']:11.1f}"
                         f"{r['speedup']:8.1f}x  {'yes' if r['same_text'] else 'NO'}")
    if "eval" in results:
        mults = args.eval_lengths.split(",")
        lines.append(f"\nevaluation forward pass, batch {args.batch_size}: seconds / peak MiB")
        lines.append(f"{'encoding':<16}" + "".join(f"{m + 'x':>18}" for m in mults))
        for name, r in results["eval"].items():
            cells = []
            for m in mults:
                c = r[f"{m}x"]
                mib = f"{c['peak_bytes'] / 2 ** 20:.0f}" if c and c["peak_bytes"] is not None else "?"
                cells.append(f"{c['s']:9.3f} / {mib:>6}" if c else f"{'n/a':>16}")
            lines.append(f"{name:<16}" + "".join(f"{c:>18}" for c in cells))
    if "decode" in results:
        lines += bench_decode.table(results["decode"], args)
    if "long" in results:
        lengths = [int(t) for t in args.long_lengths.split(",")]
        lines.append(f"\nlong evaluation forward, 1 sequence, {args.n_layer}L {args.n_head}H {args.n_embd}C: "
                     f"seconds, tokens/s, process peak MiB")
        lines.append(f"{'encoding':<16}" + "".join(f"{T:>26}" for T in lengths))
        for name, r in results["long"].items():
            cells = [f"{c['s']:.2f} s {c['tokens_per_s']:7.0f} {c['peak_bytes'] / 2 ** 20:6.0f}" if c else "n/a"
                     for c in (r.get(T) for T in lengths)]
            lines.append(f"{name:<16}" + "".join(f"{c:>26}" for c in cells))
    return "\n".join(lines)


def main(argv=None):
    try:
        args = parse_args(argv)
        nanogpt = bench_decode.load_nanogpt(args.nanogpt) if args.nanogpt else None
    except ValueError as e:
        fail(e)
    if args.threads:
        torch.set_num_threads(args.threads)
    sections = args.sections.split(",")
    results = {"args": vars(args), "machine": {"torch": torch.__version__, "threads": torch.get_num_threads(),
                                               "cpus": os.cpu_count(), "device": args.device}}
    peak = None
    if "peak" in sections:
        peak = results["peak"] = matmul_peak(args.device)
    if "train" in sections:
        results["train"], results["peak"] = bench_train(args, peak)
    if "gen" in sections:
        results["gen"] = bench_gen(args)
    if "eval" in sections:
        results["eval"] = bench_eval(args)
    if "decode" in sections:
        results["decode"] = bench_decode.bench_decode(args, nanogpt)
    if "long" in sections:
        results["long"] = bench_long(args)
    print(table(results, args))
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nfigures written to {args.json}")


if __name__ == "__main__":
    main()
