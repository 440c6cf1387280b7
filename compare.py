"""Train every positional encoding on the same recipe, measure each past its training length,
and write one report folder (docs/comparison.md, docs/tasks.md). The config's `suite` picks
what is measured:

    python compare.py configs/compare.py                          # "lm": perplexity against length
    python compare.py configs/compare.py --only=rope,alibi --seeds=1 --finetune_iters=0
    python compare.py configs/compare.py --only=rope --finetune_iters=[5,100]    # two fine-tune budgets
    python compare.py configs/compare_cpu.py --retrieval_probe=True   # the probe added to the kept runs
    python compare.py configs/tasks/quick.py                      # "tasks": accuracy against length
    python compare.py configs/tasks/quick.py --tasks=copy --encodings=none,alibi --jobs=1

Each run is train.py in a subprocess, in <out_root>[/<task>]/<enc>-s<seed>; `jobs` run side by side.
A finished run is not trained again, a shorter one resumes, one of another recipe is refused before
anything starts, and measurements are cached in the run's folder. This file parses, plans, runs and resumes;
what a suite trains, measures and reports is in comparison/ (lm_suite.py, task_suite.py, finetune.py, context.py,
runs.py). lm: evaluation.evaluate_checkpoint
at every eval length, with each method of rope_scalings, and with --finetune_iters=[N, ...] the papers'
fine-tune at finetune_factor x L (PI: Chen et al. 2023; YaRN: Peng et al. 2023) as "<enc>+<method> ftN", one
label per budget N.
"""
import itertools
import os
import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch

import positional
from comparison import lm_suite, probe, task_suite
from comparison.runs import NOT_COMPARED, PER_RUN, run_keys, trained_iters
from measure import compare_report, evaluation, kept
from measure.progress import Progress
from training.cli import check_lows, fail, fmt_time, help_text, pick_device, pick_dtype, typed
from training.config import FIELDS, ConfigError, coerce, gather, make_config

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
    "finetune_methods": [],           # lm: the methods of rope_scalings fine-tuned (besides "direct"); []: all of them;
                                      # "drope" among them: also DroPE's fine-tune, as "<enc>+drope ftN"
    "finetune_longlora": False,       # lm: also LongLoRA's fine-tune (PI + LoRA + S²-Attn), as "<enc>+longlora ftN"
    "context_use": False,             # lm: measure context gain and per-position loss of each run
    "context_labels": [],             # lm: more runs to measure: "<enc>+<method>" or "<enc>+<method> ftN"
    "context_tokens": 2048,           # lm: targets scored per context length
    "context_sequences": 8,           # lm: sequences of 16 L averaged by the per-position loss
    "context_targets": 512,           # lm: targets of the in-range context curve (each costs a window per context)
    "context_reference": "",          # lm, with context_use: this encoding also trained at finetune_factor x L
    # retrieval_probe's cost: ~9 min per model at 128 windows on one busy Xeon thread (most of it the 16 L
    # windows); seconds on a GPU (docs/comparison.md#retrieval-probe)
    "retrieval_probe": False,         # lm: the retrieval probe of each run as trained and of its context_labels
    "probe_spans": 128,               # lm: windows per distance (each scored twice: probe and control)
    "probe_span": 32,                 # lm: tokens in each copied span
    "probe_distances": [0.25, 0.5, 1, 2, 4, 8, 16],   # lm: distances between the copies, in units of L
    "variants": {},                   # lm: named runs with their own training keys, {name: {key: value}}
    "tasks": ["copy"],                # tasks: the tasks trained and scored
    "task_recipes": {},               # tasks: {task: {training key: value}}, a task's recipe (configs/tasks/<task>.py)
    "samples": 200,                   # tasks: examples scored per point
    "multiples": [1, 2, 4, 8, 16],    # tasks: scored lengths, in units of block_size (1 needed: the mastery filter)
    "finetune_steps": [],             # tasks (passkey): PI's Table 4, the fine-tune at finetune_factor x L scored
                                      # after each of these steps, e.g. [25, 50, 100, 200, 400]
    "task_distance": False,           # tasks (passkey, mqar): also exact match by key-query distance, in bins of L
}
SUITES = {"lm": lm_suite, "tasks": task_suite}   # each: OUT_ROOT, check, measure, complete, result, report
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
    if settings["task_distance"] and settings["suite"] != "tasks":
        raise ConfigError("task_distance is the task suite's (retrieval by key-query distance on passkey and mqar); "
                          "the lm suite's is retrieval_probe")
    # every training key checked before anything runs: the task suite's as a task run's (some need a task)
    cfg = make_config(dict(train_keys, task=(settings["tasks"] or [""])[0] if settings["suite"] == "tasks" else ""))
    settings["out_root"] = settings["out_root"] or SUITES[settings["suite"]].OUT_ROOT
    settings["report_dir"] = settings["report_dir"] or os.path.join(settings["out_root"], "report")
    check_lows(settings, {"seeds": 1, "jobs": 1, "threads": 0})
    settings["seed_list"] = [cfg.seed + i for i in range(settings["seeds"])]
    settings["eval_device"] = pick_device(settings["eval_device"])
    settings["eval_dtype"] = pick_dtype(settings["eval_dtype"], settings["eval_device"].split(":")[0])
    settings["threads"] = settings["threads"] or max(1, (os.cpu_count() or 1) // settings["jobs"])
    settings["encodings"] = names(settings)
    SUITES[settings["suite"]].check(settings, train_keys, cfg)
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


# compare keys that do not change what a run measures (which runs a call makes; a run's own task, variant and
# recipe are in its training keys). Every other key is in the kept runs' key, so a key added to DEFAULTS must come
# here unless it does (else every kept run stops matching); kept.load leaves these out of a kept run's settings.
# The retrieval probe's keys (probe.KEYS) are kept with its rows instead (comparison/probe.py), so that turning it on
# measures the kept runs' probe from their checkpoints rather than training them again; so are the task suite's
# retrieval-by-distance keys (task_suite.DISTANCE_KEYS)
NOT_MEASURED = ("encodings", "only", "seeds", "out_root", "report_dir", "jobs", "threads", "plots", "eval_device",
                "eval_dtype", "kept_only", "task_recipes", "tasks", "variants")


def kept_key(run, settings, train_keys, cfg):
    """What a kept result of `run` must have been made with: the comparison's measuring keys, the run's training
    keys (those that change what is trained) and its iterations."""
    own = {k: settings[k] for k in DEFAULTS if k not in NOT_MEASURED + probe.KEYS + task_suite.DISTANCE_KEYS}
    trained = {k: v for k, v in dict(train_keys, **run["keys"]).items() if k not in NOT_COMPARED}
    return dict(own, trained=trained, seed=run["seed"], iters=run["iters"], targets=evaluation.TARGETS)


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


def run_one(run, settings, train_keys, cfg):
    """Train and measure one run with its suite, unless a result of these settings is kept in the report folder
    (measure/kept.py), made here or on another machine; -> the run's result, as the report reads it (the same
    rounded numbers, kept or fresh)."""
    suite, key = SUITES[settings["suite"]], kept_key(run, settings, train_keys, cfg)
    where = kept.folder(settings["report_dir"], run["tag"])
    got = kept.load(where, key, NOT_MEASURED)
    if got is not None:
        got, more = suite.complete(run, got, settings, cfg)   # what this call measures besides the kept key
        print(f"{run['say']} kept in {where}: " + ("measured what it lacked" if more else "skipped"), flush=True)
        if more:
            kept.save(where, key, got, kept.summary(where))
        return suite.result(run, kept.rounded(got), where)
    got = suite.measure(run, settings, train_keys, cfg)
    kept.save(where, key, got, compare_report.read_log(run["dir"]))
    return suite.result(run, kept.rounded(got), where)


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
          f"iters (or a task's recipe's) of {cfg.batch_size * cfg.block_size:,} tokens each, "
          f"{settings['jobs']} side by side with {settings['threads']} thread(s) each, in {settings['out_root']}/",
          flush=True)
    t0, results, failed = time.time(), {}, []
    if settings["kept_only"]:   # an interim report: the finished runs, the rest left for later
        runs = [r for r in runs if kept.load(kept.folder(settings["report_dir"], r["tag"]),
                                             kept_key(r, settings, train_keys, cfg), NOT_MEASURED) is not None]
        print(f"compare: {len(runs)} runs kept in {settings['report_dir']}/runs", flush=True)
    progress = Progress("compare", len(runs), "runs")

    def one(i):
        try:
            results[i] = run_one(runs[i], settings, train_keys, cfg)
        except (ValueError, RuntimeError, FileNotFoundError) as e:  # one broken run does not stop the others
            print(f"{runs[i]['say']} error: {e}", file=sys.stderr, flush=True)
            failed.append((runs[i], str(e)))
        progress.step()
    with ThreadPoolExecutor(settings["jobs"]) as pool:
        list(pool.map(one, range(len(runs))))
    print(f"compare: {len(runs)} runs in {fmt_time(time.time() - t0)}", flush=True)
    done, command = [results[i] for i in sorted(results)], shlex.join(["python", "compare.py", *argv])
    md = SUITES[settings["suite"]].report(done, failed, settings, cfg, command, time.time() - t0)
    print(f"compare: report in {md}" + (f"; {len(failed)} run(s) failed" if failed else ""), flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
