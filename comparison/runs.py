"""One run of a comparison: the training keys that make it, train.py in a subprocess, and the json cache of
its measurements. compare.py plans the runs; the suites (lm_suite, task_suite) train and measure them here."""
import json
import os
import shlex
import subprocess
import sys
import time

from training import checkpoint
from training.cli import as_arg, fmt_time
from training.config import FIELDS, ConfigError, coerce, make_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository, where train.py is
PER_RUN = ("task", "pos_encoding", "seed", "out_dir", "init_from", "wandb_run_name")   # set for each run
# training keys a finished run may differ in and still count (the schedule follows max_iters; the rest
# does not change what is trained)
NOT_COMPARED = {"max_iters", "lr_decay_iters", "warmup_iters", "eval_interval", "log_interval", "eval_iters",
                "device", "dtype", "compile", "backend", "data_dir", "wandb_log", "wandb_project", "wandb_group",
                "eval_only", "overwrite"}


def check_over(train_keys, keys):
    """The training keys with a variant's or a task recipe's keys over them, checked as one config."""
    return make_config(dict(train_keys, **{k: coerce(k, v) for k, v in keys.items()}))


def run_keys(name, settings):
    """The training keys that make run `name`: its encoding, or a variant's keys."""
    return {k: coerce(k, v) for k, v in settings["variants"].get(name, {"pos_encoding": name}).items()}


def train_command(train_keys, run, settings, resume):
    """train.py's argv for one run: the training keys that differ from config.Config's defaults."""
    keys = dict(train_keys, seed=run["seed"])
    if train_keys.get("wandb_log"):   # a group means something to a logged run only (config.unused_keys)
        keys["wandb_group"] = settings["wandb_group"]
    args = [as_arg(k, v) for k, v in keys.items() if k not in FIELDS or v != FIELDS[k].default]
    args += [as_arg(k, v) for k, v in run["keys"].items()]
    args += [f"--out_dir={run['dir']}", f"--wandb_run_name={run['tag']}"]
    train_py = os.path.relpath(os.path.join(ROOT, "train.py"))  # paths in the keys are relative to the cwd
    return [sys.executable, train_py, *args] + (["--init_from=resume"] if resume else [])


def trained_iters(run_dir, want):
    """Iterations of the run's checkpoint (0 if none); refuses one trained on another recipe (want: its keys)."""
    if not os.path.exists(checkpoint.path_in(run_dir)):
        return 0
    ckpt = checkpoint.load(run_dir)
    have = {**ckpt["config"].get("pos_settings", {}), **ckpt["config"]}
    for key, value in want.items():
        got = have.get(key, FIELDS[key].default if key in FIELDS else None)
        if key not in NOT_COMPARED and got != value:
            raise ConfigError(f"{run_dir} was trained with {key}={got!r}, this comparison asks for {value!r}; "
                              f"use another --out_root (or delete {run_dir})")
    return ckpt["iter_num"]


def train(run, settings, train_keys, target, extra=(), what="training"):
    """Train (or resume) `run` to iteration `target` with train.py and `extra` arguments, echoing its
    progress lines; the whole output goes to <run>/train.out."""
    if run["done"] >= target:
        print(f"{run['say']} already trained ({run['done']} iters): training skipped", flush=True)
        return
    print(f"{run['say']} {what} to iter {target}" + (f" (resuming from iter {run['done']})" if run["done"] else ""),
          flush=True)
    os.makedirs(run["dir"], exist_ok=True)
    cmd = train_command(train_keys, run, settings, resume=run["done"] > 0) + list(extra)
    log_path, tail, t0 = os.path.join(run["dir"], "train.out"), [], time.time()
    with open(log_path, "a") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(settings["threads"]))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line.rstrip()])[-5:]
            if line.startswith(("iter ", "step ", "done:", "error:")):
                print(f"{run['say']} {line.rstrip()}", flush=True)
        if proc.wait() != 0:
            raise RuntimeError(f"train.py exited {proc.returncode}: {tail[-1] if tail else ''} (full log: {log_path})")
    print(f"{run['say']} trained in {fmt_time(time.time() - t0)}", flush=True)


def cached(path, key, compute):
    """(value, computed now): compute()'s value, kept in json file `path` and reused while `key` is the same."""
    if os.path.exists(path):
        with open(path) as f:
            got = json.load(f)
        if got.get("settings") == key:
            return got["value"], False
    value = compute()
    with open(path + ".tmp", "w") as f:
        json.dump({"settings": key, "value": value}, f, indent=1, default=float)
    os.replace(path + ".tmp", path)
    return value, True
