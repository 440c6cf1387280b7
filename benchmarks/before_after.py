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


def run(tree, args, out):
    subprocess.run([sys.executable, "bench.py", *args, f"--json={out}"], cwd=tree, check=True,
                   stdout=subprocess.DEVNULL, env=dict(os.environ, OMP_NUM_THREADS="1"))
    with open(out) as f:
        return json.load(f)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old"), p.add_argument("new")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--decode_encodings", default="rope,alibi,t5,transformer_xl,fox")
    a = p.parse_args(argv)
    train = ["--sections=train", "--rounds=3", "--threads=1"]
    decode = ["--sections=decode", f"--decode_encodings={a.decode_encodings}", "--decode_shapes=4x4x128:64",
              "--decode_window=64", "--gen_tokens=1000", "--rounds=1", "--threads=1"]
    figures = {"old": {}, "new": {}}          # tree -> (section, encoding) -> [per round]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for tree in ("old", "new"):
                t = run(getattr(a, tree), train, os.path.join(tmp, "t.json"))["train"]
                d = run(getattr(a, tree), decode, os.path.join(tmp, "d.json"))["decode"]["4x4x128:64 1t"]["rows"]
                for enc, row in t.items():
                    figures[tree].setdefault(("train step / none", enc), []).append(row["ratio_to_none"])
                for enc, row in d.items():
                    for path in ("static", "compiled"):
                        if path in row:
                            figures[tree].setdefault((f"decode {path} tok/s", enc), []).append(row[path]["tokens_per_s"])
    print(f"{'figure':24s} {'encoding':16s} {'old':>9s} {'new':>9s} {'new/old':>8s}   ({a.rounds} rounds, medians)")
    for key in figures["new"]:
        if key in figures["old"]:
            old, new = statistics.median(figures["old"][key]), statistics.median(figures["new"][key])
            print(f"{key[0]:24s} {key[1]:16s} {old:9.3f} {new:9.3f} {new / old:8.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
