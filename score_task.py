"""Score checkpoints trained on a task (train.py --task=...) against length.

    python score_task.py out-task-copy                         # 1, 2, 4, 8, 16 x the training length
    python score_task.py out-task-copy out-task-copy-alibi --lengths=32,64,128 --samples=100
    python score_task.py out-task-passkey --depths=0,0.5,1     # passkey: also the length x depth grid
    python score_task.py out-task-copy --window=32 --sinks=4 --report_dir=reports/tasks

Exact-match and per-token accuracy of greedy decoding with the KV cache (tasks/score.py).
Any other --key=value is a model key or encoding setting applied at scoring time, as in
evaluate.py (window, sinks, rope_scaling, rope_factor, ...). Writes task_scores.{md,csv,json,png}
(and passkey_grid.{csv,png}) to --report_dir (default: the first checkpoint's folder).
"""
import json
import os
import sys

from training import cli
from training.config import ConfigError
from tasks import report
from tasks.score import DEPTHS, MULTIPLES, SAMPLES, effective_window, load_task_model, passkey_grid, score_lengths

DEFAULTS = dict(lengths=[], samples=SAMPLES, depths=list(DEPTHS), report_dir="", device="auto", plots=True)


def parse(argv):
    """argv (cli.py's convention) -> (checkpoint folders, options, model overrides)."""
    opts, overrides, dirs = cli.parse(argv, DEFAULTS, other=lambda k, v: v, positionals=True, doc=__doc__)
    try:
        opts["lengths"] = [int(v) for v in opts["lengths"]]
        opts["depths"] = [float(v) for v in opts["depths"]]
    except ValueError:
        raise ConfigError(f"--lengths and --depths want comma lists of numbers, got {opts['lengths']}, {opts['depths']}")
    if not dirs:
        raise ConfigError("give at least one checkpoint folder: python score_task.py out-task-copy")
    if opts["samples"] < 1:
        raise ConfigError(f"--samples must be >= 1, got {opts['samples']}")
    return dirs, opts, overrides   # overrides are model keys, checked by config.model_config


def main(argv):
    try:
        dirs, opts, overrides = parse(argv)
        device = cli.pick_device(opts["device"])
        models = [(d, *load_task_model(d, overrides, device)) for d in dirs]
        names = {name for _, _, name, _ in models}
        if len(names) > 1:
            raise ConfigError(f"these checkpoints were trained on different tasks ({', '.join(sorted(names))}); "
                              f"score one task at a time")
        train_len = models[0][3]
        lengths = opts["lengths"] or [k * train_len for k in MULTIPLES]
        out = {"task": models[0][2], "train_len": train_len, "overrides": overrides, "samples": opts["samples"],
               "runs": {}}
        for d, model, name, _ in models:
            rows = score_lengths(model, name, lengths, opts["samples"])
            run = {"encoding": model.pe.name, "rows": rows}
            if name == "passkey":
                run["grid"] = passkey_grid(model, lengths, opts["depths"], opts["samples"])
                run["effective_window"] = effective_window(run["grid"])
            out["runs"][d] = run
            print(f"{d} ({model.pe.name}, {name}): " + ", ".join(
                f"{r['length']}: {'n/a' if r['exact'] is None else format(r['exact'], '.0%')}" for r in rows)
                + (f"; effective window {run['effective_window']}" if "grid" in run else ""), flush=True)
    except (ValueError, FileNotFoundError) as e:
        cli.fail(e)
    write(out, lengths, opts["report_dir"] or dirs[0], opts["plots"])


def write(out, lengths, report_dir, plots):
    os.makedirs(report_dir, exist_ok=True)
    path = os.path.join(report_dir, "task_scores")
    series = {f"{d} ({run['encoding']})": [run["rows"]] for d, run in out["runs"].items()}
    with open(path + ".json", "w") as f:
        json.dump(out, f, indent=1)
    report.write_csv(path + ".csv", [dict(out_dir=d, encoding=run["encoding"], **r) for d, run in out["runs"].items()
                                     for r in run["rows"]])
    title = f"{out['task']}: trained at length <= {out['train_len']}, {out['samples']} samples per point"
    md = [f"# {title}", "", "Exact match (%):", "", report.table(series, lengths), "",
          "Per-token accuracy (%):", "", report.table(series, lengths, "token")]
    if plots:
        report.plot_accuracy(path + ".png", series, lengths, out["train_len"], title)
        md += ["", "![accuracy](task_scores.png)"]
    for d, run in out["runs"].items():
        if "grid" in run:
            gpath = os.path.join(report_dir, f"passkey_grid{'' if len(out['runs']) == 1 else '_' + os.path.basename(d)}")
            report.write_csv(gpath + ".csv", run["grid"])
            md += ["", f"{d}: passkey effective context window {run['effective_window']} tokens "
                   f"(PI's rule: the largest length with >= 20% retrieval at every length up to it, every depth)"]
            if plots:
                depths = sorted({r["depth"] for r in run["grid"]})
                panel = {f"depth {dp:g}": [next(r["exact"] for r in run["grid"] if r["length"] == n and r["depth"] == dp)
                                           for n in lengths] for dp in depths}
                report.plot_heatmap(gpath + ".png", {d: panel}, lengths, "passkey retrieval, length x depth")
                md += [f"![grid]({os.path.basename(gpath)}.png)"]
    with open(path + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"report: {path}.md")


if __name__ == "__main__":
    main(sys.argv[1:])
