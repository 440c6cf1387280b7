"""Train every (task, encoding, seed) of a comparison, score each from 1x to 16x its training
length, and write one report (tables, plots, heatmap, MRR ranking, wall time).

    python compare_tasks.py configs/tasks/quick.py                 # the quick subset
    python compare_tasks.py configs/tasks/compare.py               # 7 tasks x 6 encodings x 3 seeds
    python compare_tasks.py configs/tasks/quick.py --tasks=copy --encodings=none,alibi --seeds=1 --jobs=1

Each run is train.py then score_task.py, in subprocesses (this interpreter), in
<out_root>/<task>/<encoding>-s<seed>; `jobs` runs go side by side, each with
cores // jobs threads. Restartable: a run whose checkpoint reached max_iters is not trained
again (an earlier one resumes), and its scores are reused while task_scores.json is newer
than the checkpoint and was made with the same lengths and samples.
"""
import ast
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from training import checkpoint
import tasks
from training.cli import fail, typed
from training.config import FIELDS, Config, ConfigError, coerce, load_file, parse_override
from tasks import report
from tasks.score import MULTIPLES, SAMPLES

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = dict(tasks=["copy"], encodings=["none", "rope"], seeds=1, jobs=2, threads=0, out_root="out-tasks",
                report_dir="", samples=SAMPLES, multiples=list(MULTIPLES))
PER_RUN = ("task", "pos_encoding", "seed", "out_dir", "init_from", "wandb_run_name")
NOT_COMPARED = {"max_iters", "lr_decay_iters", "eval_interval", "log_interval", "eval_iters", "device", "dtype",
                "compile", "backend", "wandb_log", "wandb_project", "wandb_group", "eval_only", "overwrite"}


def parse(argv):
    """argv: config files and --key=value -> (settings, training keys, the training Config)."""
    settings, train_keys = dict(DEFAULTS), {}
    for arg in argv:
        is_override = arg.startswith("--") or ("=" in arg and not arg.endswith(".py"))
        for key, value in [parse_override(arg)] if is_override else load_file(arg).items():
            if key in DEFAULTS:
                raw = arg.split("=", 1)[1] if is_override and isinstance(DEFAULTS[key], str) else None
                settings[key] = typed(key, value, DEFAULTS[key], raw, what="compare_tasks key")
            elif key in PER_RUN:
                raise ConfigError(f"{key!r} is set by compare_tasks.py for each run; choose with --tasks=..., "
                                  f"--encodings=..., --seeds=N and --out_root=...")
            else:
                train_keys[key] = coerce(key, value)
    import positional
    cfg = Config(**train_keys).validate()
    for name in settings["tasks"]:
        tasks.TaskData(name).check(cfg.block_size)   # unknown task, or one block_size cannot hold
    bad = [e for e in settings["encodings"] if e not in positional.REGISTRY]
    if bad:
        raise ConfigError(f"unknown encoding {bad[0]!r}; valid: {', '.join(positional.REGISTRY)}")
    if settings["seeds"] < 1 or settings["jobs"] < 1 or settings["samples"] < 1 or not settings["multiples"]:
        raise ConfigError("seeds, jobs and samples must be >= 1 and multiples non-empty")
    settings["seed_list"] = [cfg.seed + i for i in range(settings["seeds"])]
    settings["lengths"] = [int(float(m) * cfg.block_size) for m in settings["multiples"]]
    settings["report_dir"] = settings["report_dir"] or os.path.join(settings["out_root"], "report")
    settings["threads"] = settings["threads"] or max(1, (os.cpu_count() or 1) // settings["jobs"])
    return settings, train_keys, cfg


def as_arg(key, value):
    """--key=value that config.parse_override reads back as `value`."""
    if isinstance(value, str):
        try:
            ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return f"--{key}={value}"
    return f"--{key}={value!r}"


def trained_iters(run, train_keys):
    """Iterations of the run's checkpoint (0: none); refuses one trained on another recipe."""
    if not os.path.exists(checkpoint.path_in(run["dir"])):
        return 0
    ckpt = checkpoint.load(run["dir"])
    want = dict(train_keys, task=run["task"], pos_encoding=run["encoding"], seed=run["seed"])
    for key, value in want.items():
        have = ckpt["config"].get(key, FIELDS[key].default)
        if key not in NOT_COMPARED and have != value:
            raise ConfigError(f"{run['dir']} was trained with {key}={have!r}, this comparison asks for {value!r}; "
                              f"use another --out_root (or delete {run['dir']})")
    return ckpt["iter_num"]


def scores_cached(run, settings):
    path = os.path.join(run["dir"], "task_scores.json")
    if not os.path.exists(path) or os.path.getmtime(path) < os.path.getmtime(checkpoint.path_in(run["dir"])):
        return None
    with open(path) as f:
        got = json.load(f)
    rows = next(iter(got["runs"].values()))
    ok = got["samples"] == settings["samples"] and [r["length"] for r in rows["rows"]] == settings["lengths"]
    return rows if ok else None


def call(cmd, log_path, env):
    with open(log_path, "a") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        log.flush()
        r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd())
    if r.returncode != 0:
        with open(log_path) as f:
            tail = f.read().strip().splitlines()[-1:]
        raise RuntimeError(f"{os.path.basename(cmd[1])} exited {r.returncode}: {tail[0] if tail else ''} "
                           f"(log: {log_path})")


def do_run(run, settings, train_keys, cfg):
    """Train (or resume) and score one run; returns its scores and timings."""
    env = dict(os.environ, OMP_NUM_THREADS=str(settings["threads"]), PYTHONUNBUFFERED="1")
    log, timing_path = os.path.join(run["dir"], "run.out"), os.path.join(run["dir"], "timing.json")
    os.makedirs(run["dir"], exist_ok=True)
    timing = json.load(open(timing_path)) if os.path.exists(timing_path) else {}
    done = trained_iters(run, train_keys)
    if done < cfg.max_iters:
        args = [as_arg(k, v) for k, v in train_keys.items() if v != FIELDS[k].default]
        cmd = [sys.executable, os.path.join(ROOT, "train.py"), *args, f"--task={run['task']}",
               f"--pos_encoding={run['encoding']}", f"--seed={run['seed']}", f"--out_dir={run['dir']}",
               f"--wandb_run_name={run['tag']}", *(["--init_from=resume"] if done else [])]
        t0 = time.time()
        call(cmd, log, env)
        timing["train_s"] = timing.get("train_s", 0) * bool(done) + time.time() - t0
    scored = scores_cached(run, settings)
    if scored is None:
        cmd = [sys.executable, os.path.join(ROOT, "score_task.py"), run["dir"], f"--samples={settings['samples']}",
               f"--lengths={','.join(map(str, settings['lengths']))}", "--plots=False", f"--report_dir={run['dir']}"]
        t0 = time.time()
        call(cmd, log, env)
        timing["score_s"] = time.time() - t0
        scored = scores_cached(run, settings)
    with open(timing_path, "w") as f:
        json.dump(timing, f)
    return dict(run, **scored, **timing)


def main(argv):
    if {"-h", "--help"} & set(argv):
        print(__doc__ + "\nKeys of compare_tasks.py: " + ", ".join(DEFAULTS) + "; any other key is a training key.")
        return
    try:
        settings, train_keys, cfg = parse(argv)
        runs = [dict(task=t, encoding=e, seed=s, tag=f"{t}-{e}-s{s}", dir=os.path.join(settings["out_root"], t, f"{e}-s{s}"))
                for t in settings["tasks"] for e in settings["encodings"] for s in settings["seed_list"]]
        for run in runs:
            trained_iters(run, train_keys)  # a run of another recipe is refused before anything starts
    except (ValueError, FileNotFoundError) as e:
        fail(e)
    print(f"compare_tasks: {len(runs)} runs ({', '.join(settings['tasks'])} x {', '.join(settings['encodings'])} x "
          f"seeds {settings['seed_list']}), {settings['jobs']} side by side with {settings['threads']} thread(s) each, "
          f"lengths {settings['lengths']}, in {settings['out_root']}/", flush=True)
    t0, results, failed = time.time(), [], []

    def one(run):
        try:
            r = do_run(run, settings, train_keys, cfg)
            print(f"[{len(results) + len(failed) + 1}/{len(runs)} {run['tag']}] " + ", ".join(
                f"{x['length']}: {'n/a' if x['exact'] is None else format(x['exact'], '.0%')}" for x in r["rows"])
                + f" ({r.get('train_s', 0):.0f}s train, {r.get('score_s', 0):.0f}s score)", flush=True)
            results.append(r)
        except (ValueError, RuntimeError, FileNotFoundError) as e:  # one broken run does not stop the others
            print(f"[{run['tag']}] error: {e}", file=sys.stderr, flush=True)
            failed.append((run["tag"], str(e)))

    with ThreadPoolExecutor(settings["jobs"]) as pool:
        list(pool.map(one, runs))
    order = {run["tag"]: i for i, run in enumerate(runs)}
    results.sort(key=lambda r: order[r["tag"]])
    md = report.write_comparison(results, failed, settings, cfg.block_size, time.time() - t0,
                                 shlex.join(["python", "compare_tasks.py", *argv]))
    print(f"compare_tasks: report in {md}" + (f"; {len(failed)} run(s) failed" if failed else ""), flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
