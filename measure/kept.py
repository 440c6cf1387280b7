"""A finished comparison run's results kept in the report folder, <report_dir>/runs/<tag>/result.json.gz (its
measurements and its training summary, gzip-compressed JSON small enough to commit: `zcat` or `python -m gzip -d`
reads it; never the checkpoint nor the training log; an older plain result.json is read the same), so
that a comparison interrupted on one machine finishes on another: compare.py takes a run whose kept result was
made with the same settings instead of training and measuring it again, checkpoint or not. A run with a kept
result is done; one without trains.
"""
import gzip
import io
import json
import math
import os

RESULT = "result.json.gz"   # {settings, value, summary}: summary is compare_report.read_log's dict of the run's log
PLAIN = "result.json"       # the same, uncompressed: what compare.py kept before


def folder(report_dir, tag):
    return os.path.join(report_dir, "runs", tag)


def load(path, key, ignore=()):
    """The kept {rows, context, command} in folder `path` if it was made with `key` (compared as JSON), else None.
    Keys named in `ignore` are left out of the kept settings first: keys that do not change what a run measures
    (kept by an older compare.py, or a call over a subset of the tasks) do not orphan it."""
    got = read(path)
    settings = {k: v for k, v in got.get("settings", {}).items() if k not in ignore}
    return got["value"] if "value" in got and settings == as_json(key) else None


def summary(path):
    """The training summary kept in folder `path` (read_log's dict: final metrics, validation curve), or None."""
    return read(path).get("summary")


def read_json(path):
    """The JSON file at path, or {} where there is none (or a torn one)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def read(path):
    """The kept result in folder `path` ({settings, value, summary}), or {} where there is none (or a torn one)."""
    for name, opener in ((RESULT, gzip.open), (PLAIN, open)):
        try:
            with opener(os.path.join(path, name), "rt", encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError, EOFError):
            continue
    return {}


def save(path, key, value, training):
    """Keep `value` under `key` in folder `path`, with `training`, the run's training summary (read_log's dict);
    written whole or not at all."""
    os.makedirs(path, exist_ok=True)
    write(path, {"settings": as_json(key), "value": rounded(value), "summary": training})


def write(path, result):
    """result as folder path's RESULT, whole or not at all, the same bytes for the same result (no time stamp);
    a plain result.json beside it is removed (this one supersedes it)."""
    text = json.dumps(result, separators=(",", ":")).encode()
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as f:
        f.write(text)
    tmp = os.path.join(path, RESULT + ".tmp")
    with open(tmp, "wb") as f:
        f.write(buffer.getvalue())
    os.replace(tmp, os.path.join(path, RESULT))
    if os.path.exists(os.path.join(path, PLAIN)):
        os.remove(os.path.join(path, PLAIN))


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
