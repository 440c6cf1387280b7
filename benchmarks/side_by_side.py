"""posgpt's train.py against nanoGPT's, whole processes, runs interleaved, at nanoGPT's CPU recipe shape.

    python benchmarks/side_by_side.py /path/to/nanoGPT --runs=3 --iters=300 --threads=1
    python benchmarks/side_by_side.py /path/to/nanoGPT --programs=posgpt,posgpt+c,nanoGPT,nanoGPT+c

The nanoGPT folder is an argument: no nanoGPT code is in this repository. It needs nanoGPT's
train.py, config/train_shakespeare_char.py and data/shakespeare_char/{train,val}.bin.
Both programs train 4 layers, 4 heads, 128 wide, block 64, batch 12, dropout 0, on char-level
Shakespeare, evaluating 20 batches per split at iteration 0 and at the last iteration
(eval_interval = iters), with OMP/MKL threads set to --threads. nanoGPT's loop trains one
step more than asked (it stops when iter_num > max_iters): iters + 1 steps against posgpt's iters.
Printed per program: the median wall-clock seconds of the whole process and of its CPU time
(user + system, which leaves out time other processes held the cores: the steadier figure on a
shared machine), the median time of one training step, and each over nanoGPT's. The step time is
read from the programs' own per-iteration records (both log every iteration here), leaving out the
first --skip iterations (warm-up; compilation with +c): the figure the issue's target is about,
since a whole process also holds start-up, data loading, evaluation and compilation.
A program name with "+c" runs with --compile=True (torch.compile of the model; on a CPU it
needs a C++ compiler). nanoGPT's CPU recipe runs without it.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPE = ["--device=cpu", "--eval_iters=20", "--block_size=64", "--batch_size=12", "--n_layer=4", "--n_head=4",
         "--n_embd=128", "--dropout=0.0"]


PROGRAMS = ("posgpt", "posgpt+c", "nanoGPT", "nanoGPT+c")
NANOGPT_LINE = re.compile(r"^iter (\d+): loss [\d.]+, time ([\d.]+)ms")   # nanoGPT's per-iteration line


def commands(nanogpt, iters, out, programs):
    """{program: (command, folder)} for each of programs."""
    run = [f"--max_iters={iters}", f"--lr_decay_iters={iters}", f"--eval_interval={iters}", "--log_interval=1"]
    cmds = {}
    for name in programs:
        base, compiled = name.removesuffix("+c"), name.endswith("+c")
        folder = f"--out_dir={out}/{name}"
        if base == "posgpt":
            cmds[name] = ([sys.executable, "train.py", "configs/learned.py", *SHAPE, *run, "--learning_rate=1e-3",
                           "--min_lr=1e-4", folder, "--overwrite=True", f"--compile={compiled}"], ROOT)
        else:
            cmds[name] = ([sys.executable, "train.py", "config/train_shakespeare_char.py", *SHAPE, *run,
                           f"--compile={compiled}", folder], nanogpt)
    return cmds


def step_ms(program, output, skip, out):
    """Median milliseconds per training step past iteration `skip`: posgpt's from the tokens/s of
    its log.jsonl rows (full precision; its printed ms/it is rounded), nanoGPT's from its lines."""
    if program.startswith("posgpt"):
        with open(os.path.join(out, program, "log.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        per_iter = next(r["tokens_per_iter"] for r in rows if r["event"] == "start")
        times = [1000 * per_iter / r["tokens_per_sec"] for r in rows if r["event"] == "train" and r["iter"] > skip]
    else:
        found = [m for m in map(NANOGPT_LINE.match, output.splitlines()) if m]
        times = [float(m.group(2)) for m in found if int(m.group(1)) > skip]
    if not times:
        sys.exit(f"{program}: no per-iteration lines past iteration {skip} in its output; lower --skip")
    return statistics.median(times)


def timed(cmd, cwd, threads):
    """(wall seconds, CPU seconds, output) of one whole process."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), WANDB_MODE="offline")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)} (in {cwd}) failed:\n{r.stdout[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("nanogpt", help="a folder with nanoGPT's train.py, config/ and data/shakespeare_char/")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip", type=int, default=20, help="iterations left out of the step time (warm-up)")
    ap.add_argument("--programs", default="posgpt,nanoGPT", help=f"comma-separated, of {', '.join(PROGRAMS)}")
    args = ap.parse_args()
    programs = args.programs.split(",")
    if not set(programs) <= set(PROGRAMS) or not any(p.startswith("nanoGPT") for p in programs):
        sys.exit(f"--programs={args.programs}: name programs of {', '.join(PROGRAMS)}, nanoGPT among them")
    out = tempfile.mkdtemp(prefix="side_by_side_")
    cmds = commands(os.path.abspath(args.nanogpt), args.iters, out, programs)
    res = {name: [] for name in cmds}
    for r in range(args.runs):  # interleaved: posgpt, nanoGPT, posgpt, nanoGPT, ...
        for name, (cmd, cwd) in cmds.items():
            wall, cpu, output = timed(cmd, cwd, args.threads)
            res[name].append((wall, cpu, step_ms(name, output, args.skip, out)))
            print(f"run {r + 1} {name}: {wall:.2f} s wall, {cpu:.2f} s CPU, {res[name][-1][2]:.2f} ms/step", flush=True)
    med = {n: [statistics.median(run[i] for run in v) for i in range(3)] for n, v in res.items()}
    base = "nanoGPT" if "nanoGPT" in med else "nanoGPT+c"
    print(f"\n{args.iters} iterations, {args.threads} thread(s), median of {args.runs} interleaved runs; "
          f"step: median past iteration {args.skip}; ratios over {base}")
    print(f"{'program':<11}{'wall s':>9}{'CPU s':>9}{'ms/step':>9}{'wall':>8}{'CPU':>8}{'step':>8}")
    for n, (wall, cpu, step) in med.items():
        print(f"{n:<11}{wall:9.2f}{cpu:9.2f}{step:9.2f}"
              f"{wall / med[base][0]:8.3f}{cpu / med[base][1]:8.3f}{step / med[base][2]:8.3f}")


if __name__ == "__main__":
    main()
