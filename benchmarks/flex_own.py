"""Evaluation time and peak memory of encodings forming their own logits, by FlexAttention (their flex form,
attention_kernel=flex) against the default path, one no-grad forward with the loss of one sequence (bench.py's
long section's measure: wall seconds after a warm-up forward at the same length, which compiles; the peak resident
set, on CUDA the peak allocated).

    python benchmarks/flex_own.py --T=4096 --threads=1
"""
import os
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository root
import torch  # noqa: E402

from measure import bench_decode  # noqa: E402
from training.cli import fail, help_text, parse  # noqa: E402
from training.config import ConfigError  # noqa: E402

ROWS = [("fox", {}), ("shaw", {"shaw_values": False}), ("deberta", {}), ("transformer_xl", {})]


def options():
    return dict(T=4096, n_layer=4, n_head=4, n_embd=128, vocab_size=65, seed=1337, threads=1, device="cpu",
                encodings="fox,shaw,deberta,transformer_xl")


def reset_peak(device):
    """Start a new peak: CUDA's allocator, else the process's peak resident set (VmHWM, Linux)."""
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        return
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the resident set


def peak_bytes(device):
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated()
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))


def measure(args, name, settings, kernel):
    """(seconds, peak bytes, the kernels chosen) of one forward with the loss at args.T tokens."""
    shape = args.n_layer, args.n_head, args.n_embd, args.T
    model = bench_decode.build(args, shape, name, args.vocab_size, attention_kernel=kernel,
                               pos_settings=settings).eval()
    g = torch.Generator().manual_seed(args.seed)
    idx = torch.randint(args.vocab_size, (1, args.T + 1), generator=g).to(args.device)
    x, y = idx[:, :-1], idx[:, 1:]
    with torch.no_grad():
        model(x, y)   # warm-up: compiles FlexAttention at this length
        plans = model.plans(torch.arange(args.T, device=args.device), None, model.encodings)
        kernels = sorted({p.kernel for p in plans.values()})
        reset_peak(args.device)
        sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
        sync()
        t = time.perf_counter()
        model(x, y)
        sync()
        dt = time.perf_counter() - t
    return dt, peak_bytes(args.device), kernels


def main(argv=None):
    def doc():
        return help_text(__doc__, "python benchmarks/flex_own.py [--key=value ...]", options(), [options])
    try:
        args = SimpleNamespace(**parse(sys.argv[1:] if argv is None else argv, options(), doc=doc)[0])
    except ConfigError as e:
        fail(e)
    torch.set_num_threads(args.threads)
    print(f"{'encoding':<22} {'kernel':<10} {'s':>7} {'peak MiB':>9}  (T={args.T}, one sequence, no grad)")
    for name, settings in ROWS:
        if name not in args.encodings.split(","):
            continue
        label = name + "".join(f" {k}={v}" for k, v in settings.items())
        for kernel in ("", "flex"):
            dt, peak, kernels = measure(args, name, settings, kernel)
            print(f"{label:<22} {','.join(kernels):<10} {dt:>7.2f} {peak / 2 ** 20:>9.0f}", flush=True)


if __name__ == "__main__":
    main()
