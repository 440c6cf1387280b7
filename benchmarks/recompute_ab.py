"""A training step (forward, backward, AdamW) of an encoding with recompute_rows (positional/base.py) by its recomputed
query blocks against the same model's dense path (recompute_rows = 0 on the instance) and RoPE, in one process, the
three alternating inside each round: bench.py's models (4 layers x 4 heads x 128, one sequence), one thread; the
median wall and CPU time of each over the rounds after a warm-up round, and their ratios to RoPE's (issue #52).

    python benchmarks/recompute_ab.py cope 1024,2048 3
"""
import os
import statistics
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from measure.bench_common import build  # noqa: E402


def step(model, opt, x, y):
    model(x, y)[1].backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def measure(name, T, rounds):
    """{row: (median wall s, median CPU s)} of rope, name dense and name by its blocks at T tokens."""
    args = SimpleNamespace(n_layer=4, n_head=4, n_embd=128, block_size=T, vocab_size=65, seed=1337,
                           device="cpu")   # bench.py's model shape and defaults (a CLI is not imported)
    dense = build(args, name)
    dense.pe.recompute_rows = 0
    rows = {"rope": build(args, "rope"), f"{name} dense": dense, f"{name} blocks": build(args, name)}
    runs = {row: (m, m.configure_optimizers(0.1, 1e-4, (0.9, 0.99), "cpu")) for row, m in rows.items()}
    x, y = torch.randint(args.vocab_size, (2, 1, T), generator=torch.Generator().manual_seed(args.seed))
    times = {row: [] for row in runs}
    for r in range(rounds + 1):   # round 0 warms up
        for row, (m, opt) in runs.items():
            t, c = time.perf_counter(), time.process_time()
            step(m, opt, x, y)
            if r:
                times[row].append((time.perf_counter() - t, time.process_time() - c))
    return {row: [statistics.median(ts) for ts in zip(*pairs)] for row, pairs in times.items()}


if __name__ == "__main__":
    if len(sys.argv) != 4 or {"-h", "--help"} & set(sys.argv):
        print(__doc__)
        sys.exit(0 if {"-h", "--help"} & set(sys.argv) else "usage: python benchmarks/recompute_ab.py NAME T,T ROUNDS")
    torch.set_num_threads(1)
    name, lengths, rounds = sys.argv[1], [int(t) for t in sys.argv[2].split(",")], int(sys.argv[3])
    for T in lengths:
        figures = measure(name, T, rounds)
        wall, cpu = figures["rope"]
        for row, (w, c) in figures.items():
            print(f"T={T:<6} {row:<14} {w:8.2f} s {w / wall:6.2f}x rope   CPU {c:8.2f} s {c / cpu:6.2f}x rope",
                  flush=True)
