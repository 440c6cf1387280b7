"""The comparison's "tasks" suite: exact-match accuracy against length on tasks/ (tasks/score.py) of each run,
PI's Table 4 with finetune_steps (an effective window after each fine-tune step, comparison/finetune.py), and
retrieval by key-query distance with task_distance (tasks/score.py score_distances, kept apart from the kept key as
the lm suite's probe is, so that the runs kept before it stay valid: a kept run is scored by distance from its
checkpoint where that is on this machine, else reported "not measured"), and the report (tasks/report.py). The suite
interface compare.py calls: OUT_ROOT, check, measure, complete, result, report."""
import os
import time

import tasks
from measure import compare_report, kept
from tasks import report as task_report, score
from training import checkpoint, mastery
from training.config import ConfigError
from comparison.finetune import finetune, finetune_methods, finetune_scaling
from comparison.runs import PER_RUN, cached, check_over, train

OUT_ROOT = "out-tasks"   # the runs' folder unless out_root says
DISTANCE_KEYS = ("task_distance",)   # compare keys of the retrieval by distance alone


def check(settings, train_keys, cfg):
    """The task keys checked and completed (lengths, finetune_factor, finetune_len) before anything runs."""
    for name in settings["tasks"]:
        tasks.TaskData(name).check(cfg.block_size)   # unknown task, or one block_size cannot hold
    for keys in settings["variants"].values():
        check_over(dict(train_keys, task=cfg.task), keys)
    for task, keys in settings["task_recipes"].items():
        tasks.TaskData(task)   # an unknown task
        if not isinstance(keys, dict) or set(keys) & set(PER_RUN):
            raise ConfigError(f"task_recipes[{task!r}] must be a dict of training keys other than "
                              f"{', '.join(PER_RUN)}, e.g. {{'max_iters': 2500, 'learning_rate': 1e-3}}; got {keys!r}")
        check_over(dict(train_keys, task=task), keys)
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


def distance_key(settings):
    """What a run's distance rows are made with: the examples (samples, lengths) and the bins."""
    return dict(samples=settings["samples"], lengths=settings["lengths"], bins=list(score.DISTANCE_BINS))


def scores_distance(run, settings):
    """Whether this call scores `run` by distance: task_distance on, and a retrieval task."""
    return settings["task_distance"] and hasattr(tasks.get(run["task"]), "copy_distances")


def task_distance(run, settings):
    """{"key", "rows"}: score.score_distances of the checkpoint in the run's folder; cached in
    <run>/task_distance.json."""
    ckpt = checkpoint.load(run["dir"])
    key = dict(distance_key(settings), iter_num=ckpt["iter_num"])

    def score_run():
        model, name, train_len = score.load_task_model(run["dir"], ckpt=ckpt)
        return score.score_distances(model, name, settings["lengths"], train_len, settings["samples"],
                                     score.scoring_positions(ckpt["config"]))
    rows = cached(os.path.join(run["dir"], "task_distance.json"), key, score_run)[0]
    return dict(key=distance_key(settings), rows=rows)


def near_bar(run_dir, scored):
    """scored with its row at the training length L scored again on task_report.NEAR_SAMPLES examples where its
    exact match there is near the bar (task_report.near_bar); cached in run_dir/task_scores_near.json."""
    ckpt = checkpoint.load(run_dir)
    n = ckpt["model_args"]["block_size"]
    row = next((r for r in scored["rows"] if r["length"] == n), None)
    if row is None or not task_report.near_bar(row["exact"]) or row["samples"] >= task_report.NEAR_SAMPLES:
        return scored
    key = dict(samples=task_report.NEAR_SAMPLES, length=n, iter_num=ckpt["iter_num"])

    def score_again():
        model, name, _ = score.load_task_model(run_dir, ckpt=ckpt)
        positions = score.scoring_positions(ckpt["config"])
        return score.score_lengths(model, name, [n], task_report.NEAR_SAMPLES, positions)[0]
    again = cached(os.path.join(run_dir, "task_scores_near.json"), key, score_again)[0]
    print(f"{run_dir}: exact match at L={n} {row['exact']:.1%} on {row['samples']} examples, near the bar: "
          f"{again['exact']:.1%} on {again['samples']}", flush=True)
    return dict(scored, rows=[again if r["length"] == n else r for r in scored["rows"]])


def mastery_record(run):
    """{reached, cap, bar, samples} of a run trained with --stop_at_mastery (training/mastery.py), else None."""
    got = checkpoint.load(run["dir"]).get(mastery.MASTERY_KEY)
    return got and dict(reached=got["reached"], cap=run["iters"], bar=got["bar"], samples=got["samples"])


def task_windows(run, settings, train_keys, cfg):
    """PI's Table 4 for one passkey run: [{method, steps, effective_window}], steps 0 the run with the method's
    scaling, then its fine-tune at finetune_len after each of finetune_steps."""
    base, out = checkpoint.load(run["dir"])["iter_num"], []
    for m in finetune_methods(run["encoding"], settings):
        scaling = None if m in ("direct", "drope") else finetune_scaling(m, settings)   # drope: none to evaluate
        dirs = [(0, run["dir"], scaling)]
        for k in settings["finetune_steps"]:
            dirs.append((k, finetune(run, base, m, k, settings, train_keys, cfg), None))
        for k, d, overrides in dirs:
            got = task_scores(d, settings, overrides, f"task_scores-{m}.json" if overrides else "task_scores.json")
            out.append(dict(method=m, steps=k, effective_window=got["effective_window"]))
        print(f"{run['say']} {m}: effective window " + ", ".join(f"{w['steps']} steps {w['effective_window']}"
                                                                  for w in out if w["method"] == m), flush=True)
    return out


def measure(run, settings, train_keys, cfg):
    """Train (or resume) and score one task run (and PI's Table 4 with finetune_steps) -> what compare.py keeps
    of it (measure/kept.py): its scores and timings."""
    train(run, settings, train_keys, run["iters"])
    scored = near_bar(run["dir"], task_scores(run["dir"], settings))
    train_s = compare_report.read_log(run["dir"])["wall_s"]
    print(f"{run['say']} " + ", ".join(f"{x['length']}: {'n/a' if x['exact'] is None else format(x['exact'], '.0%')}"
                                       for x in scored["rows"])
          + f" ({train_s:.0f}s train, {scored.get('score_s', 0):.0f}s score)", flush=True)
    windows = task_windows(run, settings, train_keys, cfg) if settings["finetune_steps"] else []
    record = mastery_record(run)
    got = dict(scored, train_s=train_s, windows=windows, **({"mastery": record} if record else {}))
    return dict(got, distance=task_distance(run, settings)) if scores_distance(run, settings) else got


def complete(run, got, settings, cfg):
    """(a kept result with what this call asks for, whether it changed): a kept run near the bar at L and scored
    there on fewer than task_report.NEAR_SAMPLES examples is scored again (near_bar) where its checkpoint is here;
    the retrieval by distance is scored from the run's checkpoint where the kept one is missing or of other keys and
    the checkpoint here is the kept run's (its iterations), else left out ("not measured"). Without task_distance,
    none is reported."""
    here = os.path.exists(checkpoint.path_in(run["dir"]))
    again = near_bar(run["dir"], got) if here else got
    changed = again is not got
    have = again.get("distance") or {}
    if scores_distance(run, settings) and have.get("key") == kept.as_json(distance_key(settings)):
        return again, changed
    if scores_distance(run, settings) and here and run["done"] == run["iters"]:
        return dict(again, distance=task_distance(run, settings)), True
    return {k: v for k, v in again.items() if k != "distance"}, changed


def result(run, got, where):
    """The report's dict of a run from what is kept of it: its label (a variant's), not its model's encoding."""
    return {**run, **got, "encoding": run["encoding"]}


def report(done, failed, settings, cfg, command, elapsed):
    """The task report folder (tasks/report.py) of the finished runs -> its report.md."""
    return task_report.write_comparison(done, failed, settings, cfg.block_size, elapsed, command)
