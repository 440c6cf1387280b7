"""Where a training step at nanoGPT's CPU recipe shape goes, and the attention kernels it could use.

    python benchmarks/training_step_profile.py                          # compiled step, profiled
    python benchmarks/training_step_profile.py --compile=False
    python benchmarks/training_step_profile.py --mode=max-autotune      # inductor's GEMM autotuning
    python benchmarks/training_step_profile.py --sections=attention     # attention forward + backward

step: `learned`, 4 layers x 4 heads x 128, block 64, batch 12, vocabulary 65, fused AdamW,
gradient clipping, one thread: the median milliseconds of 40 steps, then torch.profiler's table
of the ops that took the most time over 20 more (products, attention, fused kernels, optimizer).
attention: one layer's causal attention at that shape (B 12, H 4, T 64, D 32), forward and
backward, in milliseconds (median of 7 x 50): SDPA (its flash kernel on a CPU), written out
(q k^T, mask, softmax, @ v) eager and compiled, and SDPA's math kernel.
"""
import argparse
import math
import os
import statistics
import sys
import time

import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from model import GPT, GPTConfig  # noqa: E402


def median_ms(fn, reps, rounds):
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t) / reps * 1e3)
    return statistics.median(times)


def step_section(args):
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=64, vocab_size=65, n_layer=4, n_head=4, n_embd=128, pos_encoding="learned",
                          dropout=0.0, bias=False))
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    run = torch.compile(model, mode=args.mode or None) if args.compile == "True" else model
    x, y = torch.randint(0, 65, (12, 64)), torch.randint(0, 65, (12, 64))

    def step():
        _, loss = run(x, y)
        loss.backward()
        loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(15):   # warm-up, compilation included
        step()
    print(f"training step, compile={args.compile} mode={args.mode or 'default'}: "
          f"{median_ms(step, 1, 40):.1f} ms (median of 40)")
    from torch.profiler import profile
    with profile() as prof:
        for _ in range(20):
            step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))


def attention_section(args):
    B, H, T, D = 12, 4, 64, 32
    hidden = ~torch.ones(T, T, dtype=torch.bool).tril()

    def written_out(q, k, v):
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
        return torch.softmax(s.masked_fill(hidden, float("-inf")), dim=-1) @ v

    def math_kernel(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    kinds = {"sdpa (flash)": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
             "written out": written_out, "written out, compiled": torch.compile(written_out),
             "sdpa math kernel": math_kernel}
    print(f"causal attention forward + backward, B {B} H {H} T {T} D {D}, one layer: ms (median of 7 x 50)")
    for name, fn in kinds.items():
        q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
        g = torch.randn(B, H, T, D)
        once = lambda fn=fn, q=q, k=k, v=v: fn(q, k, v).backward(g)  # noqa: E731
        for _ in range(20):
            once()
        print(f"  {name:24s} {median_ms(once, 50, 7):6.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", default="step,attention")
    ap.add_argument("--compile", default="True", choices=["True", "False"])
    ap.add_argument("--mode", default="", help="torch.compile mode, e.g. max-autotune; default: none")
    ap.add_argument("--rows", type=int, default=15)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.sections.split(","):
        {"step": step_section, "attention": attention_section}[name](args)


if __name__ == "__main__":
    main()
