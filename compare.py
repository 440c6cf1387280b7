"""Train every positional encoding on the same recipe, measure each past its training length,
and write one report folder (docs/comparison.md, docs/tasks.md). The config's `suite` picks
what is measured:

    python compare.py configs/compare.py                          # "lm": perplexity against length
    python compare.py configs/compare.py --only=rope,alibi --seeds=1 --finetune_iters=0
    python compare.py configs/compare.py --only=rope --finetune_iters=[5,100]    # two fine-tune budgets
    python compare.py configs/tasks/quick.py                      # "tasks": accuracy against length
    python compare.py configs/tasks/quick.py --tasks=copy --encodings=none,alibi --jobs=1

Each run is train.py in a subprocess, in <out_root>[/<task>]/<enc>-s<seed>; `jobs` run side by side.
A finished run is not trained again, a shorter one resumes, one of another recipe is refused before
anything starts, and measurements are cached in the run's folder. lm: evaluation.evaluate_checkpoint
at every eval length, with each method of rope_scalings, and with --finetune_iters=[N, ...] the papers'
fine-tune at finetune_factor x L (PI: Chen et al. 2023; YaRN: Peng et al. 2023) as "<enc>+<method> ftN", one
label per budget N.
"""
import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import positional
import tasks
from measure import compare_report, context_use, evaluation, kept, ngram
from positional import rope_scaling
from tasks import report as task_report, score
from training import checkpoint
from training.cli import as_arg, autocast, check_lows, fail, fmt_time, help_text, pick_device, pick_dtype, typed
from training.config import FIELDS, Config, ConfigError, coerce, gather, make_config
from training.wandb_util import start_wandb

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = {   # compare.py's own keys; every other key is a training key (training/config.py)
    "suite": "lm",                    # "lm": perplexity against length; "tasks": accuracy on tasks/
    "encodings": ["all"],             # encodings (and variants) compared; all: every one of the registry
    "only": [],                       # a subset of encodings for this call
    "seeds": 1,                       # runs per encoding, seeds seed, seed+1, ...; reported as mean ± std
    "out_root": "",                   # one folder per run; "": out-compare (lm) or out-tasks (tasks)
    "report_dir": "",                 # "": out_root/report
    "jobs": 1,                        # runs side by side
    "threads": 0,                     # threads per run; 0: cores / jobs
    "eval_lengths": [256, 512, 1024],  # lm: evaluation lengths (tokens)
    "eval_tokens": 8192,              # lm: tokens scored per (run, length) point, at least (evaluation.py)
    "eval_mode": "nonoverlap",        # lm: nonoverlap or sliding windows (evaluate.py)
    "eval_device": "auto",            # lm: device of the evaluations
    "eval_dtype": "auto",             # lm: dtype of the evaluations
    "rope_scalings": [],              # lm: RoPE extension methods evaluated on the encodings that take them
    "rope_factor": 0.0,               # lm: their factor s; 0: longest eval length / block_size
    "rope_factors": {},               # lm: {method: s} for the methods whose factor is not rope_factor
    "scaled_encodings": [],           # lm: the encodings evaluated with rope_scalings; []: all that take them
    "plots": True,                    # lm: also draw what each encoding does (measure/plots.py)
    "kept_only": False,               # the report of the runs kept in report_dir so far; nothing trained
    "finetune_iters": [],             # lm: fine-tune budgets at s L (iterations), one label each; []: none
    "finetune_factor": 0.0,           # lm: s of the fine-tune; 0: rope_factor
    "finetune_methods": [],           # lm: the methods of rope_scalings fine-tuned (besides "direct"); []: all of them
    "finetune_longlora": False,       # lm: also LongLoRA's fine-tune (PI + LoRA + S²-Attn), as "<enc>+longlora ftN"
    "context_use": False,             # lm: measure context gain and per-position loss of each run
    "context_labels": [],             # lm: more runs to measure: "<enc>+<method>" or "<enc>+<method> ftN"
    "context_tokens": 2048,           # lm: targets scored per context length
    "context_sequences": 8,           # lm: sequences of 16 L averaged by the per-position loss
    "context_targets": 512,           # lm: targets of the in-range context curve (each costs a window per context)
    "context_reference": "",          # lm, with context_use: this encoding also trained at finetune_factor x L
    "variants": {},                   # lm: named runs with their own training keys, {name: {key: value}}
    "tasks": ["copy"],                # tasks: the tasks trained and scored
    "task_recipes": {},               # tasks: {task: {training key: value}}, a task's own recipe (configs/tasks/<task>.py)
    "samples": 200,                   # tasks: examples scored per point
    "multiples": [1, 2, 4, 8, 16],    # tasks: scored lengths, in units of block_size (1 needed: the mastery filter)
    "finetune_steps": [],             # tasks (passkey): PI's Table 4, the fine-tune at finetune_factor x L scored
                                      # after each of these steps, e.g. [25, 50, 100, 200, 400]
}
SUITES = {"lm": "out-compare", "tasks": "out-tasks"}
PER_RUN = ("task", "pos_encoding", "seed", "out_dir", "init_from", "wandb_run_name")   # set for each run
# training keys a finished run may differ in and still count (the schedule follows max_iters; the rest
# does not change what is trained)
NOT_COMPARED = {"max_iters", "lr_decay_iters", "warmup_iters", "eval_interval", "log_interval", "eval_iters",
                "device", "dtype", "compile", "backend", "data_dir", "wandb_log", "wandb_project", "wandb_group",
                "eval_only", "overwrite"}
USAGE = "python compare.py CONFIG_FILE [--key=value ...]   (config files and keys apply in order)"


def parse(argv):
    """argv: config files and --key=value (config.gather's convention) -> (settings, training keys, Config)."""
    settings, train_keys = dict(DEFAULTS), {}
    values, note = gather(argv, own=DEFAULTS)
    if note:
        print(note)
    for key, (value, raw) in values.items():
        if key in DEFAULTS:
            settings[key] = typed(key, value, DEFAULTS[key], raw, what="compare key")
        elif key in PER_RUN:
            raise ConfigError(f"{key!r} is set by compare.py for each run; choose encodings with --only=... "
                              f"(tasks with --tasks=...) and the output folder with --out_root=...")
        else:
            train_keys[key] = value
    if settings["suite"] not in SUITES:
        raise ConfigError(f"suite must be lm or tasks, got {settings['suite']!r}")
    if settings["finetune_steps"] and settings["suite"] != "tasks":
        raise ConfigError("finetune_steps is the task suite's (PI's Table 4); the lm suite fine-tunes with "
                          "finetune_iters")
    cfg = make_config(train_keys)  # every training key checked before anything runs
    settings["out_root"] = settings["out_root"] or SUITES[settings["suite"]]
    settings["report_dir"] = settings["report_dir"] or os.path.join(settings["out_root"], "report")
    check_lows(settings, {"seeds": 1, "jobs": 1, "threads": 0})
    settings["seed_list"] = [cfg.seed + i for i in range(settings["seeds"])]
    settings["eval_device"] = pick_device(settings["eval_device"])
    settings["eval_dtype"] = pick_dtype(settings["eval_dtype"], settings["eval_device"].split(":")[0])
    settings["threads"] = settings["threads"] or max(1, (os.cpu_count() or 1) // settings["jobs"])
    settings["encodings"] = names(settings)
    (check_lm if settings["suite"] == "lm" else check_tasks)(settings, train_keys, cfg)
    settings["wandb_group"] = cfg.wandb_group or f"compare-{os.path.basename(os.path.normpath(settings['out_root']))}"
    return settings, train_keys, cfg


def names(settings):
    """The encodings and variants compared: --only, else encodings ("all": the registry and the variants)."""
    variants = settings["variants"]
    for name, keys in variants.items():
        if not isinstance(keys, dict) or keys.get("pos_encoding") not in positional.REGISTRY or {"+", " "} & set(name):
            raise ConfigError(f"variants: {name!r} needs a name without '+' or spaces and a dict of training keys "
                              f"with a pos_encoding of {', '.join(positional.REGISTRY)}, e.g. "
                              f"{{'rope_qknorm': {{'pos_encoding': 'rope', 'qk_norm': True}}}}")
    out = settings["only"] or settings["encodings"]
    out = list(positional.REGISTRY) + list(variants) if out == ["all"] else out
    unknown = [n for n in out if n not in positional.REGISTRY and n not in variants]
    if unknown or not out:
        raise ConfigError(f"unknown encoding {(unknown or [''])[0]!r}; valid: {', '.join(positional.REGISTRY)}"
                          + (f", and the variants {', '.join(variants)}" if variants else ""))
    return out


def check_over(train_keys, keys):
    """The training keys with a variant's or a task recipe's keys over them, checked as one config."""
    return make_config(dict(train_keys, **{k: coerce(k, v) for k, v in keys.items()}))


def check_tasks(settings, train_keys, cfg):
    for name in settings["tasks"]:
        tasks.TaskData(name).check(cfg.block_size)   # unknown task, or one block_size cannot hold
    for keys in settings["variants"].values():
        check_over(train_keys, keys)
    for task, keys in settings["task_recipes"].items():
        tasks.TaskData(task)   # an unknown task
        if not isinstance(keys, dict) or set(keys) & set(PER_RUN):
            raise ConfigError(f"task_recipes[{task!r}] must be a dict of training keys other than "
                              f"{', '.join(PER_RUN)}, e.g. {{'max_iters': 2500, 'learning_rate': 1e-3}}; got {keys!r}")
        check_over(train_keys, keys)
    if settings["samples"] < 1 or 1 not in settings["multiples"]:
        raise ConfigError(f"samples must be >= 1 and multiples must hold 1 (a run counts as learned by its exact "
                          f"match at the training length); got samples={settings['samples']}, "
                          f"multiples={settings['multiples']}")
    settings["lengths"] = [int(float(m) * cfg.block_size) for m in settings["multiples"]]
    steps = settings["finetune_steps"]
    if steps and (settings["tasks"] != ["passkey"] or not all(isinstance(k, int) and k > 0 for k in steps)
                  or steps != sorted(set(steps)) or settings["finetune_iters"]):
        raise ConfigError(f"finetune_steps (PI's Table 4) needs --tasks=passkey and increasing steps >= 1, e.g. "
                          f"[25,50,100], without finetune_iters (the lm suite's); got {steps}")
    settings["finetune_factor"] = settings["finetune_factor"] or max(settings["multiples"])
    settings["finetune_len"] = round(settings["finetune_factor"] * cfg.block_size) * bool(steps)


def check_lm(settings, train_keys, cfg):
    lengths = settings["eval_lengths"]
    if not lengths or any(not isinstance(n, int) or n < 1 for n in lengths):
        raise ConfigError(f"need positive integer eval_lengths; got {lengths}")
    settings["rope_factor"] = settings["rope_factor"] or max(lengths) / cfg.block_size
    settings["finetune_factor"] = settings["finetune_factor"] or settings["rope_factor"]
    check_finetune(settings, cfg)
    check_lows(settings, {"context_targets": 1})
    add_reference(settings, cfg)
    for keys in settings["variants"].values():
        check_over(train_keys, keys)
    known = [*positional.REGISTRY, *settings["variants"]]
    if any(e not in known for e in settings["scaled_encodings"]):
        raise ConfigError(f"scaled_encodings: unknown name in {settings['scaled_encodings']}; valid: {', '.join(known)}")
    for label in settings["context_labels"]:   # measured for the runs that have a row of that label
        enc, method, ft = parse_label(label)
        if ft is None or enc not in known or method not in (*positional.SCALINGS, *(FINETUNE_ONLY if ft else [])):
            raise ConfigError(f"context_labels: {label!r} is not a label of this comparison; use '<encoding>+<method>'"
                              f" or '<encoding>+<method> ftN' (N a budget of finetune_iters) for a compared encoding "
                              f"and a method of rope_scalings")
        if method not in FINETUNE_ONLY and positional.scaling_problem(run_keys(enc, settings)["pos_encoding"], method):
            raise ConfigError(f"context_labels: {label!r} names a method that {enc} does not take")


def check_finetune(settings, cfg):
    """finetune_iters (a number or a list) -> its budgets in increasing order; finetune_len and finetune_batch
    (s L tokens a sequence, batch_size / s sequences: the same tokens an iteration as pretraining); rope_factors."""
    budgets, s = settings["finetune_iters"], settings["finetune_factor"]
    if any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in budgets) or s * cfg.block_size < 1:
        raise ConfigError(f"need --finetune_iters as iteration counts >= 0 (e.g. 100 or [5,25,100]; 0: none) and "
                          f"--finetune_factor > 0; got {budgets}, {s}")
    settings["finetune_iters"] = sorted({n for n in budgets if n})
    settings["finetune_len"] = round(s * cfg.block_size) * bool(settings["finetune_iters"])
    settings["finetune_batch"] = finetune_batch(settings, cfg)
    wanted = [m for m in settings["finetune_methods"] if m not in rope_scaling.METHODS]
    if wanted:   # (one not among rope_scalings is not fine-tuned, as it is not evaluated)
        raise ConfigError(f"finetune_methods: {', '.join(map(str, wanted))} not a frequency method; use some of "
                          f"{', '.join(rope_scaling.METHODS)}")
    factors = settings["rope_factors"]
    if not isinstance(factors, dict) or any(m not in positional.SCALINGS or not isinstance(f, (int, float)) or f <= 0
                                            for m, f in factors.items()):
        raise ConfigError(f"rope_factors: need {{method: factor > 0}} with methods of "
                          f"{', '.join(positional.SCALINGS)}, e.g. {{'dynamic': 1.0}}; got {factors!r}")


def add_reference(settings, cfg):
    """With context_use, the run of context_reference (an encoding or variant) trained at s L (s = finetune_factor)
    with batch_size / s sequences per iteration, as the variant "<enc>_<s>L": the reference for context gain past
    L, measured as trained (no extension method, no fine-tune)."""
    enc, s = settings["context_reference"], settings["finetune_factor"]
    settings["reference"], settings["reference_len"] = "", 0
    if not (settings["context_use"] and enc):
        return
    if enc not in positional.REGISTRY and enc not in settings["variants"]:
        raise ConfigError(f"context_reference: unknown encoding {enc!r}; use one of {', '.join(positional.REGISTRY)}, "
                          f"a variant, or '' (no reference run)")
    name, length = f"{enc}_{s:g}L", round(s * cfg.block_size)
    keys = dict(run_keys(enc, settings), block_size=length, batch_size=max(1, round(cfg.batch_size / s)))
    settings.update(reference=name, reference_len=length, variants={**settings["variants"], name: keys})
    settings["encodings"] = [e for e in settings["encodings"] if e != name] + [name]


def parse_label(label):
    """"rope+yarn ft100" -> ("rope", "yarn", 100); "rope" -> ("rope", "", 0); ft is None for another suffix."""
    head, _, tail = label.partition(" ")
    enc, _, method = head.partition("+")
    if not tail:
        return enc, method, 0
    return enc, method, int(tail[2:]) if tail[:2] == "ft" and tail[2:].isdigit() else None


def scaling_keys(method, settings):
    """The evaluation-time model keys of a RoPE method: its name and factor (rope_factors', else rope_factor)."""
    return {"rope_scaling": method, "rope_factor": settings["rope_factors"].get(method, settings["rope_factor"])}


def run_keys(name, settings):
    """The training keys that make run `name`: its encoding, or a variant's keys."""
    return {k: coerce(k, v) for k, v in settings["variants"].get(name, {"pos_encoding": name}).items()}


def takes(name, method, settings):
    """Whether the runs of `name` (an encoding or a variant) are evaluated and fine-tuned with the RoPE method."""
    wanted = settings["scaled_encodings"]
    enc = run_keys(name, settings)["pos_encoding"]
    reference = name == settings.get("reference")   # measured as trained (lm; the task suite has none)
    return positional.scaling_problem(enc, method) is None and (not wanted or name in wanted) and not reference


# ---- one run: train.py in a subprocess -------------------------------------------------
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


# ---- suite "lm": perplexity against length --------------------------------------------
def evaluate_run(run_dir, enc, settings, data_dir, ckpt, label=None):
    """(rows, computed now) of evaluation.evaluate_checkpoint at every eval length, each with its
    label: `label` alone (a fine-tune), else the encoding and "<enc>+<method>" per method it takes."""
    key = {k: settings[k] for k in ("eval_lengths", "eval_tokens", "eval_mode", "rope_factor", "rope_factors")}
    key.update(iter_num=ckpt["iter_num"], targets=evaluation.TARGETS)  # a run trained further is evaluated again
    key["rope_scalings"] = [m for m in settings["rope_scalings"] if label is None and takes(enc, m, settings)]
    variants = [(label or enc, None)] + [(f"{enc}+{m}", scaling_keys(m, settings)) for m in key["rope_scalings"]]
    return cached(os.path.join(run_dir, "results.json"), key, lambda: [
        dict(row, label=name) for name, overrides in variants
        for row in evaluation.evaluate_checkpoint(run_dir, key["eval_lengths"], mode=key["eval_mode"],
                                                  overrides=overrides, tokens_per_point=key["eval_tokens"],
                                                  device=settings["eval_device"], data_dir=data_dir,
                                                  dtype=settings["eval_dtype"], ckpt=ckpt)])


# The fine-tune protocol (PI: Chen et al. 2023; YaRN: Peng et al. 2023); a new method: its name here (unless it
# is a rope_scaling) and its train.py arguments in finetune_args. "direct": no scaling (PI's control);
# "longlora": LongLoRA's (PI's interpolation, LoRA and S²-Attn: training/longlora.py), with finetune_longlora.
FINETUNE_ONLY = ["direct", "longlora"]


def finetune_methods(enc, settings):
    """The fine-tunes of one encoding: FINETUNE_ONLY's and each frequency method of rope_scalings it
    takes; none when fine-tuning is off or the encoding takes no scaling."""
    if not (settings["finetune_iters"] or settings["finetune_steps"]) or not takes(enc, "linear", settings):
        return []
    methods = [m for m in settings["rope_scalings"] if m in rope_scaling.METHODS and takes(enc, m, settings)
               and m in (settings["finetune_methods"] or settings["rope_scalings"])]
    return ["direct"] + methods + ["longlora"] * settings["finetune_longlora"]


def finetune_args(method, settings, cfg):
    """train.py's arguments of a fine-tune beyond the run's own: s L tokens per sequence, batch_size / s
    sequences (the same tokens per iteration), the final learning rate held, and the method's scaling from L."""
    args = [f"--block_size={settings['finetune_len']}", f"--batch_size={finetune_batch(settings, cfg)}",
            "--decay_lr=False", f"--learning_rate={cfg.min_lr!r}"]
    scaling = "linear" if method == "longlora" else method
    if scaling in rope_scaling.METHODS:
        keys = finetune_scaling(scaling, settings)
        args += [f"--rope_scaling={scaling}", f"--rope_factor={keys['rope_factor']!r}",   # L: the pretraining length,
                 f"--rope_original_max_position={cfg.block_size}"]        # also when resuming a fine-tune at s L
    return args + ["--finetune_method=longlora"] * (method == "longlora")


def finetune_scaling(method, settings):
    """The model keys of a RoPE method at the fine-tuning length: its name, its rope_factors factor or finetune_factor."""
    return {"rope_scaling": method, "rope_factor": settings["rope_factors"].get(method, settings["finetune_factor"])}


def finetune_batch(settings, cfg):
    """Sequences per fine-tune iteration: batch_size / s (s = finetune_factor), as many tokens as in pretraining."""
    return max(1, round(cfg.batch_size / settings["finetune_factor"]))


def ft_dir(run_dir, method, budget):
    return f"{run_dir}-ft-{method}-{budget}"


def finetune(run, base_iter, method, budget, settings, train_keys, cfg):
    """Fine-tune the run's checkpoint (at base_iter) for `budget` iterations in a folder of its own; -> the folder.
    The budgets of a method (finetune_iters, or the task suite's finetune_steps) are one fine-tune observed at
    each (as PI's Table 4 by steps): a budget starts from a copy of the next smaller one's checkpoint (the
    pretrained run's for the smallest; the learning rate is constant), so the sweep costs the largest budget; a
    copy made along other budgets is made again."""
    below = [b for b in settings["finetune_iters"] or settings["finetune_steps"] if b < budget]
    prev = below[-1] if below else 0
    ft = dict(run, dir=ft_dir(run["dir"], method, budget), tag=f"{run['tag']}-ft-{method}-{budget}",
              say=f"{run['say'][:-1]} ft{budget} {method}]")
    marker, source = os.path.join(ft["dir"], "finetuned_from.json"), {"iter_num": base_iter, "budgets": below}
    if not os.path.exists(marker) or json.load(open(marker)) != source:
        os.makedirs(ft["dir"], exist_ok=True)   # a copy, so the pretrained run stays as it is; a stale one replaced
        shutil.copyfile(checkpoint.path_in(ft_dir(run["dir"], method, prev) if prev else run["dir"]),
                        checkpoint.path_in(ft["dir"]))
        with open(marker, "w") as f:
            json.dump(source, f)
    ft["done"] = checkpoint.load(ft["dir"])["iter_num"]
    target = base_iter + budget
    train(ft, settings, train_keys, target, finetune_args(method, settings, cfg) + [f"--max_iters={target}"],
          f"fine-tuning at {settings['finetune_len']}")
    return ft["dir"]


def log_eval_to_wandb(ckpt_cfg, rows, run, settings):
    """The evaluation curve of one run as a wandb table and line plot, in the comparison's group."""
    cfg = Config(**{k: v for k, v in ckpt_cfg.items() if k in FIELDS})
    cfg.wandb_group, enc = settings["wandb_group"], run["encoding"]
    wb = start_wandb(cfg, job_type="eval", name=f"{run['tag']}-eval")
    if wb is None:
        return
    import wandb
    table = wandb.Table(columns=["label", "length", "loss", "ppl"],
                        data=[[r["label"], r["length"], r["loss"], r["ppl"]] for r in rows])
    wb.log({"eval/ppl_by_length": table,
            "eval/ppl_plot": wandb.plot.line(table, "length", "ppl", stroke="label", title=f"{enc}: ppl vs length")})
    for r in rows:
        wb.summary[f"eval/ppl@{r['length']}" + ("" if r["label"] == enc else f"/{r['label']}")] = r["ppl"]
    wb.finish()


def context_run(run, labels, settings, cfg):
    """{label: {"gain": rows, "curve": list, "in_range": rows, "reference": bool}} of context_use.measure and
    in_range_curve for the run as trained and each of context_labels among its rows' `labels`; cached in
    <run>/context.json. Every in-range curve runs to its label's own training length, on the same targets for
    every label: those after the longest training length of the comparison."""
    sources = {run["encoding"]: (run["dir"], None)}
    for label in [label for label in settings["context_labels"] if label in labels]:
        _, method, ft = parse_label(label)
        sources[label] = (ft_dir(run["dir"], method, ft), None) if ft else (run["dir"], scaling_keys(method, settings))
    longest = max(cfg.block_size, settings["finetune_len"], settings["reference_len"])
    key = dict(tokens=settings["context_tokens"], sequences=settings["context_sequences"],
               targets=settings["context_targets"], targets_from=longest,
               rope_factor=settings["rope_factor"], rope_factors=settings["rope_factors"], labels=sorted(sources),
               iters={label: checkpoint.load(d)["iter_num"] for label, (d, _) in sources.items()})

    def measure():
        out = {}
        for label, (folder, overrides) in sources.items():
            ckpt = checkpoint.load(folder)
            model = checkpoint.build_model(ckpt, overrides, settings["eval_device"], strict=False)
            tokens, _ = evaluation.validation_tokens(ckpt, cfg.data_dir, "val")
            with autocast(settings["eval_device"], settings["eval_dtype"]):
                got = context_use.measure(model, tokens, cfg.block_size, scored_tokens=settings["context_tokens"],
                                          sequences=settings["context_sequences"], device=settings["eval_device"])
                own = ckpt["model_args"]["block_size"]   # the curve runs to the label's own training length
                got["in_range"] = context_use.in_range_curve(model, tokens, own, settings["context_targets"], longest,
                                                             settings["eval_device"])
            out[label] = dict(got, curve=None if got["curve"] is None else got["curve"].tolist())
        return out
    got = cached(os.path.join(run["dir"], "context.json"), key, measure)[0]
    return {label: dict(g, reference=label == settings["reference"]) for label, g in got.items()}


def lm_run(run, settings, train_keys, cfg):
    """Train (or resume) one run, evaluate it and its fine-tunes; -> its result dict, also kept in the report
    folder (measure/kept.py): a run kept with these settings, here or on another machine, is not run again."""
    enc, key, where = run["encoding"], kept_key(run, settings, train_keys, cfg), kept.folder(settings["report_dir"],
                                                                                             run["tag"])
    got = kept.load(where, key, NOT_MEASURED)
    if got is not None:
        print(f"{run['say']} kept in {where}: skipped", flush=True)
        return dict(run, **got, dir=run["dir"] if os.path.exists(checkpoint.path_in(run["dir"])) else where)
    train(run, settings, train_keys, cfg.max_iters)
    ckpt = checkpoint.load(run["dir"])  # loaded once, for the evaluation and wandb
    rows, fresh = evaluate_run(run["dir"], enc, settings, cfg.data_dir, ckpt)
    methods, budgets = finetune_methods(enc, settings), settings["finetune_iters"]
    for m, n in itertools.product(methods, budgets):   # a method's budgets in increasing order (finetune)
        folder = finetune(run, ckpt["iter_num"], m, n, settings, train_keys, cfg)
        ft_ckpt = checkpoint.load(folder)
        got = evaluate_run(folder, enc, settings, cfg.data_dir, ft_ckpt, f"{enc}+{m} ft{n}")[0]
        rows += [dict(r, trained_params=ft_ckpt["lora"]["trained_params"]) if "lora" in ft_ckpt else r for r in got]
    order = [enc] + [f"{enc}+{m}{ft}" for m in methods for ft in ("", *(f" ft{n}" for n in budgets))]
    rows.sort(key=lambda r: order.index(r["label"]) if r["label"] in order else len(order))
    print(f"{run['say']} " + ("evaluated" if fresh else "evaluation cached: skipped") + ": " + ", ".join(
        f"ppl@{r['length']} {r['ppl']:.2f}" for r in rows if r["label"] == enc), flush=True)
    if cfg.wandb_log and fresh:
        log_eval_to_wandb(ckpt["config"], rows, run, settings)
    context = context_run(run, {r["label"] for r in rows}, settings, cfg) if settings["context_use"] else {}
    got = dict(rows=rows, context=context, command=shlex.join(["python"] + train_command(train_keys, run, settings,
                                                                                          resume=False)[1:]))
    kept.save(where, key, got, compare_report.read_log(run["dir"]))
    return dict(run, **kept.rounded(got))   # the report reads the same numbers as from a kept result


# compare keys that do not change what a run measures (which runs a call makes; a run's own task, variant and
# recipe are in its training keys). Every other key is in the kept runs' key, so a key added to DEFAULTS must come
# here unless it does (else every kept run stops matching); kept.load leaves these out of a kept run's settings
NOT_MEASURED = ("encodings", "only", "seeds", "out_root", "report_dir", "jobs", "threads", "plots", "eval_device",
                "eval_dtype", "kept_only", "task_recipes", "tasks", "variants")


def kept_key(run, settings, train_keys, cfg):
    """What a kept result of `run` must have been made with: the comparison's measuring keys, the run's training
    keys (those that change what is trained) and its iterations."""
    own = {k: settings[k] for k in DEFAULTS if k not in NOT_MEASURED}
    trained = {k: v for k, v in dict(train_keys, **run["keys"]).items() if k not in NOT_COMPARED}
    return dict(own, trained=trained, seed=run["seed"], iters=run["iters"], targets=evaluation.TARGETS)


def baselines(results, settings, cfg):
    """measure/ngram.py's rows of the runs' dataset, fitted on its training split and scored on the evaluation's
    targets; kept in <report_dir>/runs/ngram.json, keyed on both (without a checkpoint, every run kept from
    elsewhere: the kept rows of the same settings, or none)."""
    keys = dict(lengths=settings["eval_lengths"], tokens_per_point=settings["eval_tokens"], mode=settings["eval_mode"])
    key = dict(keys, dataset=cfg.dataset, orders=ngram.ORDERS, d=ngram.D, targets=evaluation.TARGETS)
    path = os.path.join(settings["report_dir"], "runs", "ngram.json")
    have = [r["dir"] for r in results if os.path.exists(checkpoint.path_in(r["dir"]))]
    if not have:
        got = kept.read_json(path)
        same = {k: v for k, v in got.get("settings", {}).items() if k != "data"} == kept.as_json(key)
        return got["value"] if same else []
    data = ngram.checkpoint_data(checkpoint.load(have[0]), cfg.data_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return cached(path, dict(key, data=ngram.fingerprint(*data[:2])), lambda: ngram.baseline_rows(*data, **keys))[0]


# ---- suite "tasks": accuracy against length --------------------------------------------
def task_scores(run_dir, settings, overrides=None, name="task_scores.json"):
    """score.score_checkpoints' result for the checkpoint in run_dir (with overrides) and its time; cached in
    run_dir/name."""
    ckpt = checkpoint.load(run_dir)
    sampled = score.scoring_positions(ckpt["config"]) is not None   # scored on sampled positions (new: rescored)
    key = dict(samples=settings["samples"], lengths=settings["lengths"], iter_num=ckpt["iter_num"],
               **({"overrides": overrides} if overrides else {}), **({"positions": "sampled"} if sampled else {}))

    def score_run():
        t0 = time.time()
        out = score.score_checkpoints([run_dir], overrides, settings["lengths"], settings["samples"])["runs"][run_dir]
        return dict(out, score_s=time.time() - t0)
    return cached(os.path.join(run_dir, name), key, score_run)[0]


def task_windows(run, settings, train_keys, cfg):
    """PI's Table 4 for one passkey run: [{method, steps, effective_window}], steps 0 the run with the method's
    scaling, then its fine-tune at finetune_len after each of finetune_steps."""
    base, out = checkpoint.load(run["dir"])["iter_num"], []
    for m in finetune_methods(run["encoding"], settings):
        scaling = None if m == "direct" else finetune_scaling(m, settings)
        dirs = [(0, run["dir"], scaling)]
        for k in settings["finetune_steps"]:
            dirs.append((k, finetune(run, base, m, k, settings, train_keys, cfg), None))
        for k, d, overrides in dirs:
            got = task_scores(d, settings, overrides, f"task_scores-{m}.json" if overrides else "task_scores.json")
            out.append(dict(method=m, steps=k, effective_window=got["effective_window"]))
        print(f"{run['say']} {m}: effective window " + ", ".join(f"{w['steps']} steps {w['effective_window']}"
                                                                  for w in out if w["method"] == m), flush=True)
    return out


def task_run(run, settings, train_keys, cfg):
    """Train (or resume) and score one task run (and PI's Table 4 with finetune_steps); -> its scores and timings,
    also kept in the report folder (measure/kept.py), as an lm run's: a kept run is not run again, anywhere."""
    key, where = kept_key(run, settings, train_keys, cfg), kept.folder(settings["report_dir"], run["tag"])
    got = kept.load(where, key, NOT_MEASURED)
    if got is not None:
        print(f"{run['say']} kept in {where}: skipped", flush=True)
        return {**run, **got, "encoding": run["encoding"]}   # the run's label (a variant's), not its model's encoding
    train(run, settings, train_keys, run["iters"])
    scored = task_scores(run["dir"], settings)
    train_s = compare_report.read_log(run["dir"])["wall_s"]
    print(f"{run['say']} " + ", ".join(f"{x['length']}: {'n/a' if x['exact'] is None else format(x['exact'], '.0%')}"
                                       for x in scored["rows"])
          + f" ({train_s:.0f}s train, {scored.get('score_s', 0):.0f}s score)", flush=True)
    windows = task_windows(run, settings, train_keys, cfg) if settings["finetune_steps"] else []
    got = dict(scored, train_s=train_s, windows=windows)
    kept.save(where, key, got, compare_report.read_log(run["dir"]))
    return {**run, **kept.rounded(got), "encoding": run["encoding"]}


# ---- the comparison -------------------------------------------------------------------
def plan(settings, train_keys):
    """Every run of the comparison (task by task, seed by seed), each checked against its folder's checkpoint."""
    # seed by seed: an interrupted comparison has every encoding of its first seeds to report
    runs = [(task, enc, seed) for task, seed, enc in itertools.product(
        settings["tasks"] if settings["suite"] == "tasks" else [""], settings["seed_list"], settings["encodings"])]
    for i, (task, enc, seed) in enumerate(runs):
        recipe = {k: coerce(k, v) for k, v in settings["task_recipes"].get(task, {}).items()}
        keys = dict(run_keys(enc, settings), **({"task": task, **recipe} if task else {}))
        run_dir = os.path.join(settings["out_root"], task, f"{enc}-s{seed}")
        runs[i] = dict(task=task, encoding=enc, seed=seed, dir=run_dir, keys=keys,
                       tag="-".join(filter(None, [task, enc, f"s{seed}"])),
                       say=f"[{i + 1}/{len(runs)} {' '.join(filter(None, [task, enc]))} s{seed}]",
                       done=trained_iters(run_dir, dict(train_keys, **keys, seed=seed)),
                       iters=keys.get("max_iters", train_keys.get("max_iters", FIELDS["max_iters"].default)))
    return runs


def main(argv):
    if {"-h", "--help"} & set(argv):
        print(help_text(__doc__, USAGE, DEFAULTS, [sys.modules[__name__]], training=True))
        return
    if not argv:   # as train.py: the defaults alone are hours of training; name a config to mean it
        print(f"usage: {USAGE}   (--help: every key)\nconfigs: configs/compare.py configs/tasks/quick.py "
              f"configs/tasks/compare.py", file=sys.stderr)
        sys.exit(2)
    try:
        settings, train_keys, cfg = parse(argv)
        runs = plan(settings, train_keys)
    except (ValueError, FileNotFoundError) as e:
        fail(e)
    torch.set_num_threads(settings["threads"])  # the in-process measurements share the cores like the runs
    lm = settings["suite"] == "lm"
    what = " x ".join(", ".join(x) for x in ([] if lm else settings["tasks"], settings["encodings"]) if x)
    print(f"compare: {len(runs)} runs ({what} x seeds {settings['seed_list']}), "
          f"{sum(r['done'] < r['iters'] for r in runs)} to train, {cfg.max_iters} "
          f"iters (or a task's recipe's) of {cfg.batch_size * cfg.block_size:,} tokens each, {settings['jobs']} side by side with "
          f"{settings['threads']} thread(s) each, in {settings['out_root']}/", flush=True)
    t0, results, failed = time.time(), {}, []

    def one(i):
        try:
            results[i] = (lm_run if lm else task_run)(runs[i], settings, train_keys, cfg)
        except (ValueError, RuntimeError, FileNotFoundError) as e:  # one broken run does not stop the others
            print(f"{runs[i]['say']} error: {e}", file=sys.stderr, flush=True)
            failed.append((runs[i], str(e)))

    if settings["kept_only"]:   # an interim report: the finished runs, the rest left for later
        runs = [r for r in runs if kept.load(kept.folder(settings["report_dir"], r["tag"]),
                                             kept_key(r, settings, train_keys, cfg), NOT_MEASURED) is not None]
        print(f"compare: {len(runs)} runs kept in {settings['report_dir']}/runs", flush=True)
    with ThreadPoolExecutor(settings["jobs"]) as pool:
        list(pool.map(one, range(len(runs))))
    print(f"compare: {len(runs)} runs in {fmt_time(time.time() - t0)}", flush=True)
    done, command = [results[i] for i in sorted(results)], shlex.join(["python", "compare.py", *argv])
    if lm:
        ngrams = baselines(done, settings, cfg) if done else []
        md = compare_report.write(done, failed, settings, cfg, command, ngrams)
    else:
        md = task_report.write_comparison(done, failed, settings, cfg.block_size, time.time() - t0, command)
    print(f"compare: report in {md}" + (f"; {len(failed)} run(s) failed" if failed else ""), flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
