"""The compiled decode step's time against the number of cache slots it attends over.

    python benchmarks/decode_step_vs_cache.py --encoding=alibi --slots=64,256,1024,2001
    python benchmarks/decode_step_vs_cache.py --dynamic=True          # one graph, symbolic in the slots
    python benchmarks/decode_step_vs_cache.py --cpp_wrapper=True      # inductor's C++ wrapper

The compiled step attends over the first n slots of the cache. Compiled with static shapes
(--dynamic=False), each slot count is its own graph, compiled when first met; with
--dynamic=True (what model.py does for a cache with one slot per position) one graph serves
every n. This prints, for the recipe shape (4x4x128, block 64, vocab 77, random init, one
thread), the time of the first call at each slot count (a compilation, where there is one)
and the median microseconds of the compiled step: what attending over the slots written so
far saves against attending over the whole cache, what the symbolic sizes cost per step,
and what the C++ wrapper saves per step.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import model as decode  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoding", default="alibi")
    ap.add_argument("--slots", default="64,128,256,512,1024,2001")
    ap.add_argument("--cpp_wrapper", default="False", choices=["True", "False"])
    ap.add_argument("--dynamic", default="False", choices=["True", "False"])
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
    step = decode.compiled_step(dynamic=args.dynamic == "True")
    print(f"{args.encoding}, cpp_wrapper={args.cpp_wrapper}, dynamic={args.dynamic}: slots, first call s, "
          f"us per compiled step (median of 5 x {args.reps})")
    with torch.no_grad():
        for n in slots:
            t = time.perf_counter()
            step(model, tok, d.pos, d.cache, n)      # the step attends over the first n slots
            compile_s = time.perf_counter() - t
            times = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(args.reps):
                    step(model, tok, d.pos, d.cache, n)
                times.append((time.perf_counter() - t) / args.reps)
            print(f"{n:6d} {compile_s:8.1f} {statistics.median(times) * 1e6:8.0f}", flush=True)


if __name__ == "__main__":
    main()
