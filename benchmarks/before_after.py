"""bench.py of two checkouts side by side: the training step's ratio to `none` and decode tokens/s,
each tree's bench.py run in turn (old, new, old, new, ...) so that both see the same machine.

    git worktree add --detach ../old f7937b1
    python benchmarks/before_after.py ../old . --rounds=3

Prints one table: per encoding, the median over rounds of each tree's figure and new / old.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

TRAIN = ["--sections=train", "--rounds=3", "--threads=1"]
DECODE = ["--sections=decode", "--decode_shapes=4x4x128:64", "--decode_window=64", "--gen_tokens=1000",
          "--rounds=1", "--threads=1"]


def figures(tree, argv, out):
    """{(figure, encoding): value} of one run of tree's bench.py (the same JSON at f7937b1 and now)."""
    subprocess.run([sys.executable, "bench.py", *argv, f"--json={out}"], cwd=tree, check=True,
                   stdout=subprocess.DEVNULL, env=dict(os.environ, OMP_NUM_THREADS="1"))
    with open(out) as f:
        r = json.load(f)
    found = {}
    for enc, row in r.get("train", {}).items():   # wall time, and CPU time (less moved by other work on the machine)
        found[("train step / none", enc)] = row["ratio_to_none"]
        found[("train CPU / none", enc)] = row["cpu_ratio_to_none"]
    for enc, row in r.get("decode", {}).get("4x4x128:64 1t", {}).get("rows", {}).items():
        found.update({(f"decode {path} tok/s", enc): row[path]["tokens_per_s"] for path in ("static", "compiled")
                      if path in row})
    return found


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old"), p.add_argument("new")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--decode_encodings", default="rope,alibi,t5,transformer_xl,fox", help="'' for no decoding")
    p.add_argument("--train_encodings", default="", help="bench.py's --encodings for the training step ('': its own)")
    a = p.parse_args(argv)
    runs = {"old": [], "new": []}
    train = TRAIN + [f"--encodings=none,{a.train_encodings}"] * bool(a.train_encodings)
    decode = [*DECODE, f"--decode_encodings={a.decode_encodings}"]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        for _ in range(a.rounds):
            for tree, found in runs.items():     # one {(figure, encoding): value} per round
                decoded = figures(getattr(a, tree), decode, out) if a.decode_encodings else {}
                found.append({**figures(getattr(a, tree), train, out), **decoded})
    print(f"{'figure':24s} {'encoding':16s} {'old':>9s} {'new':>9s} {'new/old':>8s}   ({a.rounds} rounds, medians)")
    for key in [k for k in runs["new"][0] if k in runs["old"][0]]:
        old, new = (statistics.median(r[key] for r in runs[tree]) for tree in ("old", "new"))
        print(f"{key[0]:24s} {key[1]:16s} {old:9.3f} {new:9.3f} {new / old:8.3f}")

if __name__ == "__main__":
    main(sys.argv[1:])
