"""A finished comparison run's results kept in the report folder, <report_dir>/runs/<tag>/result.json (its
measurements and its training summary, small enough to commit; never the checkpoint nor the training log), so
that a comparison interrupted on one machine finishes on another: compare.py takes a run whose kept result was
made with the same settings instead of training and measuring it again, checkpoint or not. A run with a kept
result is done; one without trains.
"""
import json
import math
import os

RESULT = "result.json"   # {settings, value, summary}: summary is compare_report.read_log's dict of the run's log


def folder(report_dir, tag):
    return os.path.join(report_dir, "runs", tag)


def load(path, key, ignore=()):
    """The kept {rows, context, command} in folder `path` if it was made with `key` (compared as JSON), else None.
    Keys named in `ignore` are left out of the kept settings first: keys that do not change what a run measures
    (kept by an older compare.py, or a call over a subset of the tasks) do not orphan it."""
    got = read_json(os.path.join(path, RESULT))
    settings = {k: v for k, v in got.get("settings", {}).items() if k not in ignore}
    return got["value"] if "value" in got and settings == as_json(key) else None


def summary(path):
    """The training summary kept in folder `path` (read_log's dict: final metrics, validation curve), or None."""
    return read_json(os.path.join(path, RESULT)).get("summary")


def read_json(path):
    """The JSON file at path, or {} where there is none (or a torn one)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def save(path, key, value, training):
    """Keep `value` under `key` in folder `path`, with `training`, the run's training summary (read_log's dict);
    written whole or not at all."""
    os.makedirs(path, exist_ok=True)
    tmp = os.path.join(path, RESULT + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"settings": as_json(key), "value": rounded(value), "summary": training}, f, separators=(",", ":"))
    os.replace(tmp, os.path.join(path, RESULT))


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
