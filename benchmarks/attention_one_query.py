"""One decode query's attention over n cached keys: how long, and at what memory bandwidth.

    python benchmarks/attention_one_query.py --keys=64,1000,2000

At nanoGPT's recipe shape (4 heads of 32, float32, one thread) a decode step reads every
cached key and value once per layer: 2 x H x n x D x 4 bytes. This times, per layer, SDPA
with an additive mask row (what the static step runs), the same written out (q k^T, softmax,
@ v), and that compiled, and prints the bandwidth SDPA's time implies: when it is near what
one core can stream, attending over the whole text cannot get much cheaper without reading
less (a window, or a smaller cache dtype).
"""
import argparse
import math
import statistics
import time

import torch
from torch.nn import functional as F


def per_call_us(fn, *args, reps=2000, rounds=5):
    for _ in range(50):
        fn(*args)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            fn(*args)
        times.append((time.perf_counter() - t) / reps * 1e6)
    return statistics.median(times)


def written_out(q, k, v, mask):
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1])) + mask
    return torch.softmax(s, dim=-1) @ v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", default="64,1000,2000")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head_dim", type=int, default=32)
    args = ap.parse_args()
    torch.set_num_threads(1)
    H, D = args.heads, args.head_dim
    compiled = torch.compile(written_out, dynamic=False)
    sdpa = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
    print(f"one query, {H} heads of {D}, float32, 1 thread: us per call (median of 5 x 2000), SDPA's bandwidth")
    print(f"{'keys':>6} {'sdpa':>8} {'written':>8} {'compiled':>9} {'GB/s':>6}")
    with torch.no_grad():
        for n in (int(x) for x in args.keys.split(",")):
            q, k, v = torch.randn(1, H, 1, D), torch.randn(1, H, n, D), torch.randn(1, H, n, D)
            mask = torch.zeros(1, 1, 1, n)
            t = [per_call_us(f, q, k, v, mask) for f in (sdpa, written_out, compiled)]
            gbs = 2 * H * n * D * 4 / (t[0] * 1e-6) / 1e9
            print(f"{n:6d} {t[0]:8.1f} {t[1]:8.1f} {t[2]:9.1f} {gbs:6.1f}", flush=True)


if __name__ == "__main__":
    main()
