"""posgpt's train.py against nanoGPT's, whole processes, runs interleaved, at nanoGPT's CPU recipe shape.

    python benchmarks/side_by_side.py /path/to/nanoGPT --runs=3 --iters=300 --threads=1

The nanoGPT folder is an argument: no nanoGPT code is in this repository. It needs nanoGPT's
train.py, config/train_shakespeare_char.py and data/shakespeare_char/{train,val}.bin.
Both programs train 4 layers, 4 heads, 128 wide, block 64, batch 12, dropout 0, on char-level
Shakespeare, evaluating 20 batches per split at iteration 0 and at the last iteration
(eval_interval = iters), with OMP/MKL threads set to --threads. nanoGPT's loop trains one
step more than asked (it stops when iter_num > max_iters): iters + 1 steps against posgpt's iters.
Printed per program: the median wall-clock seconds of the whole process and of its CPU time
(user + system, which leaves out time other processes held the cores: the steadier figure on a
shared machine), and posgpt's over nanoGPT's.
"""
import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = ["--device=cpu", "--eval_iters=20", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
         "--n_embd=128", "--dropout=0.0"]


def commands(nanogpt, iters, out):
    run = [f"--max_iters={iters}", f"--lr_decay_iters={iters}", f"--eval_interval={iters}"]
    posgpt = ([sys.executable, "train.py", "configs/learned.py", *SHAPE, *run, "--learning_rate=1e-3",
               "--min_lr=1e-4", f"--out_dir={out}/posgpt", "--overwrite=True"], ROOT)
    nano = ([sys.executable, "train.py", "config/train_shakespeare_char.py", *SHAPE, *run, "--compile=False",
             "--log_interval=1", f"--out_dir={out}/nanogpt"], nanogpt)
    return {"posgpt": posgpt, "nanoGPT": nano}


def timed(cmd, cwd, threads):
    """(wall seconds, CPU seconds) of one whole process."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), WANDB_MODE="offline")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} (in {cwd}) failed:\n{r.stdout[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("nanogpt", help="a folder with nanoGPT's train.py, config/ and data/shakespeare_char/")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="side_by_side_")
    cmds = commands(os.path.abspath(args.nanogpt), args.iters, out)
    res = {name: [] for name in cmds}
    for r in range(args.runs):  # interleaved: posgpt, nanoGPT, posgpt, nanoGPT, ...
        for name, (cmd, cwd) in cmds.items():
            res[name].append(timed(cmd, cwd, args.threads))
            print(f"run {r + 1} {name}: {res[name][-1][0]:.2f} s wall, {res[name][-1][1]:.2f} s CPU", flush=True)
    wall = {n: statistics.median(w for w, _ in v) for n, v in res.items()}
    cpu = {n: statistics.median(c for _, c in v) for n, v in res.items()}
    print(f"\n{args.iters} iterations, {args.threads} thread(s), median of {args.runs} interleaved runs")
    print(f"{'program':<10}{'wall s':>9}{'CPU s':>9}")
    for n in cmds:
        print(f"{n:<10}{wall[n]:9.2f}{cpu[n]:9.2f}")
    print(f"{'ratio':<10}{wall['posgpt'] / wall['nanoGPT']:9.3f}{cpu['posgpt'] / cpu['nanoGPT']:9.3f}"
          f"   (posgpt / nanoGPT)")


if __name__ == "__main__":
    main()
