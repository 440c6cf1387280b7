"""The compiled decode step's time against the number of cache slots it attends over.

    python benchmarks/decode_step_vs_cache.py --encoding=alibi --slots=64,256,1024,2001
    python benchmarks/decode_step_vs_cache.py --cpp_wrapper=True      # inductor's C++ wrapper

decode.py compiles one step for the whole cache (static shapes: every step attends over all
slots, the unwritten ones masked), so a generation of N tokens pays the N-slot step from
its first token. This prints, for the recipe shape (4x4x128, block 64, vocab 77, random
init, one thread), the compile time and the median microseconds of the compiled step at each
slot count: what a design that compiles a few cache sizes (and attends over the smallest
that holds the text) would save, and what the C++ wrapper saves per step.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import decode  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoding", default="alibi")
    ap.add_argument("--slots", default="64,128,256,512,1024,2001")
    ap.add_argument("--cpp_wrapper", default="False", choices=["True", "False"])
    ap.add_argument("--reps", type=int, default=100)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch._dynamo.config.cache_size_limit = 64
    torch._inductor.config.cpp_wrapper = args.cpp_wrapper == "True"
    slots = [int(s) for s in args.slots.split(",")]
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=77,
                          pos_encoding=args.encoding, dropout=0.0, bias=False)).eval()
    d = decode.Decoder(model, compile=True)
    d.open(1, max(slots), torch.device("cpu"))
    tok = torch.zeros(1, 1, dtype=torch.long)
    d.prefill(tok)
    print(f"{args.encoding}, cpp_wrapper={args.cpp_wrapper}: slots, compile s, us per compiled step (median of 5 x {args.reps})")
    with torch.no_grad():
        for n in slots:
            d.cache.filled = n                       # the step attends over the first n slots
            t = time.perf_counter()
            d.step(model, tok, d.pos, d.cache)
            compile_s = time.perf_counter() - t
            times = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(args.reps):
                    d.step(model, tok, d.pos, d.cache)
                times.append((time.perf_counter() - t) / args.reps)
            print(f"{n:6d} {compile_s:8.1f} {statistics.median(times) * 1e6:8.0f}", flush=True)


if __name__ == "__main__":
    main()
