"""Issue #22: how SDPA's CPU kernel takes a bias, one attention layer (4 heads, 32 channels), one thread.

    python benchmarks/bias_views.py [--T=8192] [--rounds=2]

Rows: SDPA's causal kernel without a bias; ALiBi's dense (H, T, T) bias built and passed as a mask; the same
bias as a Hankel view of one vector per head with the keys in reverse order (what the "relative" kernel
does: attention/long_cpu.py's attend_by_distance); a query/key width of 33 with values of 32 (SDPA falls back to its
math kernel) and of 33 (FoX's extra key channel, values padded); a dense bool causal mask. Prints seconds per
call (the last round), after checking that the view gives the dense bias's output.
"""
import argparse
import time

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--T", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(1)
    B, H, T, D = 1, 4, a.T, 32
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    q33, k33, v33 = (torch.cat([t, torch.randn(B, H, T, 1, generator=g)], -1) for t in (q, k, v))
    slopes = 2.0 ** -(2 * torch.arange(1, H + 1))                                   # 1/4 .. 1/256
    i = torch.arange(T)

    def dense():
        d = (i[:, None] - i[None, :]).float()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=(-slopes[:, None, None] * d).masked_fill(d < 0, -1e30))

    def hankel():   # key j' = T - 1 - j: the bias of (r, j') is u[r + j'], d = r - T + 1 + j'
        d = (torch.arange(2 * T - 1) - (T - 1)).float()
        u = (-slopes[:, None] * d).masked_fill(d < 0, -1e30).contiguous()           # (H, 2T - 1)
        view = u.as_strided((1, H, T, T), (0, u.stride(0), 1, 1))
        return F.scaled_dot_product_attention(q, k.flip(2), v.flip(2), attn_mask=view)

    rows = {"causal, no bias": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            "dense bias (built + SDPA)": dense, "Hankel view (relative)": hankel,
            "causal, q/k 33, v 32": lambda: F.scaled_dot_product_attention(q33, k33, v, is_causal=True),
            "causal, q/k/v 33": lambda: F.scaled_dot_product_attention(q33, k33, v33, is_causal=True),
            "bool causal mask": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(
                T, T, dtype=torch.bool).tril())}
    torch.testing.assert_close(hankel(), dense(), rtol=1e-4, atol=1e-5)
    seconds = {}
    for _ in range(a.rounds):
        for name, f in rows.items():
            t0 = time.perf_counter()
            f()
            seconds[name] = time.perf_counter() - t0
    print(f"one layer, B 1, H {H}, D {D}, T {T}, 1 thread: seconds (round {a.rounds} of {a.rounds})")
    for name, s in seconds.items():
        print(f"  {name:28s} {s:8.3f}  {s / seconds['causal, no bias']:6.2f}x causal")


if __name__ == "__main__":
    main()
