"""One recipe trial: train a task with some keys, score exact match at L on held-out examples, append a row
to reports/tasks-recipes/trials.csv (docs/tasks.md's "Recipes that learn" table is generated from it).

    python -m tasks.trial copy sinusoidal --max_iters=8000 --learning_rate=1e-3
    python -m tasks.trial mqar rope --max_iters=8000 --n_head=1 --n_embd=128

The task's config (configs/tasks/<task>.py) is the base; iterations also set lr_decay_iters, and warmup is 100
unless given. Keys other than the iterations, learning rate and warmup go to the row's `other` column.
--time_limit=S stops the training after S seconds (SIGTERM: train.py saves first) and scores the checkpoint it
saved; the row then says `stopped_at=<iteration>` under `other` (its schedule was max_iters'). Rows from a GPU
name `device=cuda` under `other`, and their train_s is that machine's.
"""
import csv
import os
import subprocess
import sys
import tempfile
import time

import torch

FIELDS = ["task", "encoding", "seed", "max_iters", "learning_rate", "warmup_iters", "exact_at_L", "samples",
          "train_s", "other"]
SHOWN = ("max_iters", "learning_rate", "warmup_iters", "seed")


def train(cmd, env, time_limit):
    """Runs train.py's command; True when time_limit stopped it (it saved a checkpoint on the SIGTERM)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    try:
        code, stopped = proc.wait(timeout=time_limit), False
    except subprocess.TimeoutExpired:
        proc.terminate()
        code, stopped = proc.wait(), True
    if code != 0 and not stopped:     # stopped: 143 after its save (or killed before any: then no checkpoint)
        raise subprocess.CalledProcessError(code, cmd)
    return stopped


def main(argv):
    if len(argv) < 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    task, encoding, keys = argv[0], argv[1], dict(a[2:].split("=", 1) for a in argv[2:])
    keys.setdefault("warmup_iters", "100")
    keys.setdefault("seed", "1337")
    config = __import__(f"configs.tasks.{task}", fromlist=["x"])
    keys.setdefault("max_iters", str(config.max_iters))
    keys.setdefault("learning_rate", str(config.learning_rate))
    out_csv = keys.pop("trials", "reports/tasks-recipes/trials.csv")
    samples = int(keys.pop("samples", "200"))
    time_limit = float(keys.pop("time_limit", "0")) or None
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "train.py", f"configs/tasks/{task}.py", f"--pos_encoding={encoding}", f"--out_dir={out}",
               f"--lr_decay_iters={keys['max_iters']}", "--wandb_log=False", *(f"--{k}={v}" for k, v in keys.items())]
        start = time.time()
        threads = os.environ.get("TRIAL_THREADS", "1")     # one thread: trials run beside other work
        stopped = train(cmd, {**os.environ, "OMP_NUM_THREADS": threads}, time_limit)
        train_s = round(time.time() - start)
        from tasks import get
        from tasks.score import accuracy, load_task_model, scoring_positions
        from training import checkpoint
        try:
            ckpt = checkpoint.load(out)
        except checkpoint.CheckpointError:
            print(f"tasks.trial: {task} {encoding} saved no checkpoint in its {time_limit:g} s; no row written "
                  f"(give a longer --time_limit)", file=sys.stderr)
            return 1
        if stopped and ckpt["iter_num"] < int(keys["max_iters"]):     # (not when the limit met its last step)
            keys["stopped_at"] = str(ckpt["iter_num"])
        model, name, L = load_task_model(out, ckpt=ckpt)
        exact, _ = accuracy(model, get(name), L, samples, positions=scoring_positions(ckpt["config"]))   # as trained
    other = " ".join(f"{k}={v}" for k, v in keys.items() if k not in SHOWN)
    row = dict(task=task, encoding=encoding, seed=keys["seed"], max_iters=keys["max_iters"],
               learning_rate=keys["learning_rate"], warmup_iters=keys["warmup_iters"], exact_at_L=exact,
               samples=samples, train_s=train_s, other=other)
    new = not os.path.exists(out_csv)
    with open(out_csv, "a", newline="") as f:
        w = csv.DictWriter(f, FIELDS, lineterminator="\n")
        if new:
            w.writeheader()
        w.writerow(row)
    print(row)
    return 0


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("TRIAL_THREADS", "1")))
    sys.exit(main(sys.argv[1:]))
