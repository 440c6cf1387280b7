"""evaluate.py's thread choice, measured: whole evaluate.py processes with --threads=1, with
--threads=<all cores> and with the default (0: cpu_threads.py, one thread per core that other
processes leave idle, sampled at the start), runs interleaved, on a quiet machine and again
while another process keeps one core busy.

    python benchmarks/eval_threads.py out-compare/rope-s1337 --runs=3

Prints per setting and load the median wall seconds, and for the default which count it
picked in each run. Extra arguments after -- go to evaluate.py (e.g. -- --lengths=256,4096).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUSY = "import time\nwhile True: sum(range(10000))"   # one core held, as another user's job would


def run(ckpt, threads, extra, report_dir):
    """(wall seconds, the thread line evaluate.py printed) of one evaluate.py process."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    cmd = [sys.executable, "evaluate.py", ckpt, f"--threads={threads}", f"--report_dir={report_dir}",
           "--overwrite=True", *extra]
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}")
    said = re.search(r"; (\d+) thread\(s\): ([^)]*\))?", r.stdout)
    return wall, said.group(0)[2:] if said else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt", help="a checkpoint folder (out_dir of train.py)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("extra", nargs="*", help="evaluate.py arguments, after --")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    report_dir = tempfile.mkdtemp(prefix="eval_threads_")
    settings = [1, cores, 0]
    for load in ("quiet", "one core busy"):
        busy = subprocess.Popen([sys.executable, "-c", BUSY]) if load != "quiet" else None
        try:
            walls, picks = {s: [] for s in settings}, []
            for r in range(args.runs):
                for s in settings:
                    wall, said = run(args.ckpt, s, args.extra, report_dir)
                    walls[s].append(wall)
                    if s == 0:
                        picks.append(said)
                    print(f"{load}, run {r + 1}, --threads={s}: {wall:.1f} s  {said}", flush=True)
        finally:
            if busy:
                busy.kill()
        print(f"\n{load}: median wall seconds of {args.runs} interleaved runs")
        for s in settings:
            print(f"  --threads={s}{' (the default)' if s == 0 else ''}: {statistics.median(walls[s]):.1f} s")
        print("  picked: " + "; ".join(p.split(":")[0] for p in picks) + "\n", flush=True)


if __name__ == "__main__":
    main()
