"""Greedy task scoring of a randomized-positions checkpoint (Ruoss et al.): through the KV cache at explicit
positions (tasks/score.py greedy) against recomputing each answer's prefix (its way before 2026-11-26); prints the
seconds and (exact, per-token) accuracy of each at 64 and 256 tokens, 200 examples, one thread.

    python benchmarks/greedy_positions.py out-tasks/reverse/rope_randomized-s1337
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository root
import torch  # noqa: E402

import tasks  # noqa: E402
import tasks.score as S  # noqa: E402
from training import checkpoint  # noqa: E402


def recompute(model, ids, mask, pos=None):
    out = ids.clone()
    for a in mask.nonzero().squeeze(1).tolist():
        out[:, a] = model(out[:, :a], pos=pos[:a])[0][:, -1].argmax(-1)
    return out


def main(out_dir):
    torch.set_num_threads(1)
    ckpt = checkpoint.load(out_dir)
    model, name, _ = S.load_task_model(out_dir, ckpt=ckpt)
    positions, cached = S.scoring_positions(ckpt["config"]), S.greedy
    for n in (64, 256):
        for label, greedy in (("cache", cached), ("recompute", recompute)):
            S.greedy = greedy
            t = time.perf_counter()
            acc = S.accuracy(model, tasks.get(name), n, 200, positions=positions)
            print(f"{n:>5} {label:<10} {time.perf_counter() - t:7.2f} s  exact {acc[0]:.3f}  token {acc[1]:.4f}")
    S.greedy = cached


if __name__ == "__main__":
    if len(sys.argv) != 2 or {"-h", "--help"} & set(sys.argv):
        sys.exit(print(__doc__) if {"-h", "--help"} & set(sys.argv) else "usage: greedy_positions.py <checkpoint dir>")
    main(sys.argv[1])
