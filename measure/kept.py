"""A finished comparison run's results kept in the report folder, <report_dir>/runs/<tag>/ (result.json and
the run's training log, small enough to commit; never the checkpoint), so that a comparison interrupted on one
machine finishes on another: compare.py takes a run whose kept result was made with the same settings instead
of training and measuring it again, checkpoint or not.
"""
import json
import math
import os
import shutil

LOG = "log.jsonl"   # train.py's metrics (compare_report.read_log reads them from the run's folder)


def folder(report_dir, tag):
    return os.path.join(report_dir, "runs", tag)


def load(path, key, ignore=()):
    """The kept {rows, context, command} in folder `path` if it was made with `key` (compared as JSON), else None.
    Keys named in `ignore` are left out of the kept settings first: keys that do not change what a run measures
    (kept by an older compare.py, or a call over a subset of the tasks) do not orphan it."""
    got = read_json(os.path.join(path, "result.json"))
    settings = {k: v for k, v in got.get("settings", {}).items() if k not in ignore}
    return got["value"] if "value" in got and settings == as_json(key) else None


def read_json(path):
    """The JSON file at path, or {} where there is none (or a torn one)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def save(path, key, value, run_dir):
    """Keep `value` under `key` in folder `path`, with run_dir's training log; written whole or not at all."""
    os.makedirs(path, exist_ok=True)
    if os.path.exists(os.path.join(run_dir, LOG)):
        shutil.copyfile(os.path.join(run_dir, LOG), os.path.join(path, LOG + ".tmp"))
        os.replace(os.path.join(path, LOG + ".tmp"), os.path.join(path, LOG))
    tmp = os.path.join(path, "result.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"settings": as_json(key), "value": rounded(value)}, f, separators=(",", ":"))
    os.replace(tmp, os.path.join(path, "result.json"))


def as_json(x):
    return json.loads(json.dumps(x, default=float))


def rounded(x, digits=7):
    """x with every float to `digits` significant digits (a kept per-position curve is 16 L of them)."""
    if isinstance(x, float):
        return x if not math.isfinite(x) or x == 0 else float(f"{x:.{digits}g}")
    if isinstance(x, dict):
        return {k: rounded(v, digits) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [rounded(v, digits) for v in x]
    return x
