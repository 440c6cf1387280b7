"""Stick-breaking's truncated evaluation (positional/stick_breaking.py) by chunk size against its dense form: one
long evaluation's block of queries (64 rows over 16,384 keys, 4 heads of 32: bench.py's model at 16,384 tokens), one
thread, the median of `rounds` calls each, for logits that spend the stick within the first chunk (random q, k of
scale 0.3, an untrained model's) and for logits near -10 everywhere, where the truncation never stops (issue #52).

    python benchmarks/stick_breaking_chunk.py --chunks=256,512,1024,2048 --rounds=5
"""
import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from positional.base import Ctx  # noqa: E402
from positional.stick_breaking import stick_breaking_dense, stick_breaking_truncated  # noqa: E402


def median_s(fn, rounds):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(chunks, rounds, Tk=16384, Tq=64):
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    pos = torch.arange(Tk)
    ctx = Ctx(pos[Tk - Tq:], pos)
    v = torch.randn(1, 4, Tk, 32, generator=g)
    spent = torch.randn(1, 4, Tq, 32, generator=g) * 0.3, torch.randn(1, 4, Tk, 32, generator=g) * 0.3
    never = torch.ones(1, 4, Tq, 32), -10 / math.sqrt(32) + 0.01 * torch.randn(1, 4, Tk, 32, generator=g)
    print(f"{Tq} queries over {Tk} keys, 4 heads of 32, 1 thread: median s of {rounds} calls")
    with torch.no_grad():
        for name, (q, k) in (("spent in the first chunk", spent), ("never spent", never)):
            cells = [f"dense {median_s(lambda: stick_breaking_dense(q, k, v, ctx), rounds):.4f}"]
            for c in chunks:
                cells.append(f"{c}: {median_s(lambda: stick_breaking_truncated(q, k, v, ctx, chunk=c), rounds):.4f}")
            print(f"{name:26s}" + "  ".join(cells))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", default="256,512,1024,2048", help="chunk sizes, comma separated")
    p.add_argument("--rounds", type=int, default=5, help="calls a figure, the median taken")
    a = p.parse_args()
    main([int(c) for c in a.chunks.split(",")], a.rounds)
