"""Issue #22: an own-logits encoding's long evaluation on its fast path against forming its logits by query blocks,
the whole model (4 layers x 4 heads x 128, random init) in one process, rounds interleaved, one thread.

    python benchmarks/own_paths.py [--encodings=transformer_xl,shaw] [--T=16384] [--rounds=2]

The slow path is OwnLogits.attend by query blocks (the logits formed, masked and softmaxed); the fast path is
the model's choice (Transformer-XL: its position term as SDPA's mask; Shaw, DeBERTa, FoX, CoPE: the banded
kernel). Prints seconds per forward (median over rounds), the ratio, and the loss of both (the same).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

import model as model_mod  # noqa: E402
import positional  # noqa: E402
from measure.bench_decode import machine_name  # noqa: E402
from positional.base import OwnLogits  # noqa: E402


def forward(m, x, slow):
    """Seconds and loss of one forward; slow: every own-logits attention formed by query blocks."""
    cls = type(m.pe)
    saved = {k: cls.__dict__[k] for k in ("attend", "far") if k in cls.__dict__}
    if slow:   # the class as OwnLogits alone would run it: its attend is forming logits, no far field
        for k in saved:
            setattr(cls, k, getattr(OwnLogits, k))
    try:
        t = time.perf_counter()
        with torch.no_grad():
            loss = m(x, x)[1].item()
        return time.perf_counter() - t, loss
    finally:
        for k, f in saved.items():
            setattr(cls, k, f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encodings", default="transformer_xl,shaw")
    p.add_argument("--T", type=int, default=16384)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"machine: {machine_name('cpu')}, torch {torch.__version__}, 1 thread, {args.T} tokens")
    print(f"{'encoding':<16}{'by blocks s':>12}{'fast s':>10}{'ratio':>8}  loss (blocks / fast)")
    for name in args.encodings.split(","):
        if not issubclass(positional.REGISTRY[name], OwnLogits):
            raise SystemExit(f"{name} forms no logits of its own; choose among "
                             f"{', '.join(n for n, c in positional.REGISTRY.items() if issubclass(c, OwnLogits))}")
        torch.manual_seed(0)
        m = model_mod.GPT(model_mod.GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=128, vocab_size=65,
                                              pos_encoding=name, dropout=0.0, bias=False)).eval()
        x = torch.randint(0, 65, (1, args.T))
        times = {True: [], False: []}
        for _ in range(args.rounds):
            for slow in (True, False):
                s, loss = forward(m, x, slow)
                times[slow].append((s, loss))
        slow, fast = (statistics.median(s for s, _ in times[k]) for k in (True, False))
        loss_slow, loss_fast = times[True][0][1], times[False][0][1]
        print(f"{name:<16}{slow:12.2f}{fast:10.2f}{slow / fast:8.2f}  {loss_slow:.6f} / {loss_fast:.6f}")


if __name__ == "__main__":
    main()
