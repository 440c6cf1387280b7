"""What bench.py and benchmarks/device.py both use: the seeded models of a bench (random init), the device's sync, the
peak memory of a pass (CUDA's peak allocated, else the process's peak resident set) and the timed no-grad forward.
"""
import ctypes
import gc
import time

import torch

from measure import bench_decode
from training.cli import autocast
from training.config import ConfigError


def counts(key, text):
    """'1,2' -> [1, 2]; ConfigError unless every item is a whole number > 0."""
    if not all(t.strip().isdigit() and int(t) > 0 for t in text.split(",")):
        raise ConfigError(f"--{key} must be whole numbers > 0, e.g. 1,2; got {text!r}")
    return [int(t) for t in text.split(",")]


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def build(args, pos, compile=False, **overrides):
    shape = args.n_layer, args.n_head, args.n_embd, args.block_size
    model = bench_decode.build(args, shape, pos, args.vocab_size, **overrides)
    return torch.compile(model) if compile else model   # a compiled module forwards attributes to the model


def reset_peak(device):
    """Start the process's peak memory afresh: CUDA's peak allocated; on CPU the peak resident set
    (VmHWM), after malloc_trim has handed freed heap pages back to the OS (Linux)."""
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the resident set
    except OSError:
        pass


def bench_forward(args, batch, lengths, loss=False, kernel=""):
    """{encoding: {T: {s, tokens_per_s, peak_bytes}}} of one no-grad forward of `batch` sequences of T
    tokens (and the loss if `loss`); lengths past an encoding's position table are left out."""
    out = {}
    for name in args.encodings.split(","):
        model = build(args, name, args.compile, attention_kernel=kernel).eval()
        out[name] = {}
        for T in [T for T in lengths if model.max_positions is None or T <= model.max_positions]:
            idx = torch.randint(args.vocab_size, (batch, T + 1), device=args.device)
            x, y = idx[:, :-1], idx[:, 1:] if loss else None
            with torch.no_grad(), autocast(args.device, args.dtype):
                model(x if args.compile or kernel or x.is_cuda else x[:, :64])  # warm up (compiled: at this length;
                # CUDA: FlexAttention compiles per length)
                reset_peak(args.device)
                sync(args.device)
                t = time.perf_counter()
                model(x, y)
                sync(args.device)
            dt = time.perf_counter() - t
            out[name][T] = dict(s=dt, tokens_per_s=batch * T / dt, peak_bytes=peak_bytes(args.device))
            print(f"  {name} at {T}: {dt:.2f} s, peak {out[name][T]['peak_bytes'] / 2 ** 20:.0f} MiB", flush=True)
    return out


def peak_bytes(device):
    """The peak since reset_peak: CUDA's peak allocated, else the process's peak resident set (VmHWM)."""
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated()
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
