"""Tables and pictures of task scores: checkpoints' (evaluate.py on a task checkpoint) or a
whole tasks x encodings x seeds comparison's (compare.py, suite "tasks").

Seeds are summarised as mean ± sample standard deviation. The ranking follows Kazemnejad
et al. 2023 (https://arxiv.org/abs/2305.19466, figure 3): in each task the encodings are
ranked by exact-match accuracy averaged over the lengths past the training length (seed
means; ties share the better rank), and an encoding's MRR is the mean of 1/rank over tasks.
"""
import json
import math
import os

from measure.compare_report import fmt, md_table, mean_std, palette, plot_by_length, write_csv
from positional.plot import save
from tasks.score import effective_window

import matplotlib.pyplot as plt  # noqa: E402  (after compare_report, which picks the Agg backend)


def at(seeds, n, key="exact"):
    """The seeds' values at length n: seeds are lists of rows {length, exact, token}."""
    return [next((r[key] for r in rows if r["length"] == n), None) for rows in seeds]


def tables(series, lengths, exact="Exact match (%):"):
    """Markdown tables of exact match and of per-token accuracy (%): one row per label, one column per
    length, cells mean ± std over the label's seeds. series: {label: [rows of one seed]}."""
    out = []
    for key, title in (("exact", exact), ("token", "Per-token accuracy (%):")):
        out += [title, "", *md_table([""] + [str(n) for n in lengths], [
            [label] + [fmt(at(seeds, n, key), ".1f", scale=100, missing="n/a") for n in lengths]
            for label, seeds in series.items()]), ""]
    return out


def plot_accuracy(path, series, lengths, train_len, title):
    """Exact match (solid) and per-token accuracy (dotted) against length, the training length marked."""
    colors = palette(series)
    curves = [(label if key == "exact" else None, [at(seeds, n, key) for n in lengths], style, colors[label])
              for label, seeds in series.items() for key, style in (("exact", "-"), ("token", ":"))]
    return plot_by_length(path, curves, lengths, train_len, xlabel="sequence length (tokens)",
                          ylabel="accuracy (solid: exact match, dotted: per token)", title=title, ylim=(-0.02, 1.02))


def plot_heatmap(path, panels, lengths, title):
    """panels: {panel title: {row label: [value or None per length]}}: one heatmap per panel."""
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(2.2 + 2.6 * n, 0.6 + 0.35 * max(len(p) for p in panels.values())),
                             squeeze=False)
    for ax, (name, rows) in zip(axes[0], panels.items()):
        grid = [[math.nan if v is None else v for v in vals] for vals in rows.values()]
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(lengths)), [str(x) for x in lengths], fontsize=7)
        ax.set_yticks(range(len(rows)), list(rows), fontsize=7)
        ax.set_title(name, fontsize=9)
        for i, vals in enumerate(grid):
            for j, v in enumerate(vals):
                ax.text(j, i, "n/a" if math.isnan(v) else f"{100 * v:.0f}", ha="center", va="center", fontsize=6,
                        color="white" if math.isnan(v) or v < 0.6 else "black")
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def mrr(by_task):
    """{task: {encoding: score or None}} -> {encoding: mean reciprocal rank over tasks}, best first."""
    recip = {}
    for scores in by_task.values():
        for enc, s in scores.items():
            rank = 1 + sum(1 for t in scores.values() if t is not None and (s is None or t > s))
            recip.setdefault(enc, []).append(1.0 / rank)
    return dict(sorted(((e, sum(v) / len(v)) for e, v in recip.items()), key=lambda kv: -kv[1]))


def past_training(rows, train_len, key="exact"):
    """Mean accuracy over the lengths past the training length (None if there are none, or n/a)."""
    vals = [r[key] for r in rows if r["length"] > train_len]
    return sum(vals) / len(vals) if vals and None not in vals else None


def write_comparison(results, failed, settings, train_len, wall_s, command):
    """report.md, runs.csv, <task>.png and heatmap.png of compare.py's task suite in settings['report_dir'];
    failed: [(run, message)]. Returns the report's path."""
    out, lengths = settings["report_dir"], settings["lengths"]
    os.makedirs(out, exist_ok=True)
    task_names = list(dict.fromkeys(r["task"] for r in results))
    encs = list(dict.fromkeys(r["encoding"] for r in results))
    by = {(t, e): [r for r in results if r["task"] == t and r["encoding"] == e] for t in task_names for e in encs}
    write_csv(os.path.join(out, "runs.csv"), [dict(task=r["task"], encoding=r["encoding"], seed=r["seed"], **x,
                                                   train_s=round(r["train_s"], 1)) for r in results for x in r["rows"]],
              empty=("task",))
    md = ["# Tasks: length generalisation by encoding", "", f"`{command}`", "",
          f"{len(results)} runs ({', '.join(task_names)} x {', '.join(encs)} x seeds {settings['seed_list']}), "
          f"trained at lengths <= {train_len}, scored at {lengths} with {settings['samples']} samples per point; "
          f"{settings['jobs']} run(s) side by side, {settings['threads']} thread(s) each, {os.cpu_count()} cores. "
          f"Wall time of this call {wall_s / 60:.1f} min (runs' own: training "
          f"{sum(r['train_s'] for r in results) / 60:.1f} min, scoring "
          f"{sum(r.get('score_s', 0) for r in results) / 60:.1f} min, summed over runs; runs reused from an "
          f"earlier call count their first time).", ""]
    if failed:
        md += ["Failed runs: " + "; ".join(f"{run['tag']}: {msg}" for run, msg in failed), ""]
    ood = {t: {e: mean_std([past_training(r["rows"], train_len) for r in by[t, e]])[0] for e in encs}
           for t in task_names}
    md += ["## Ranking (MRR over tasks, Kazemnejad et al. 2023)", "",
           "Exact match averaged over the lengths past the training length, mean over seeds (%), and the mean "
           "reciprocal rank of each encoding across tasks.", ""]
    md += md_table(["encoding", "MRR", *task_names], [[e, f"{v:.2f}"] + [
        "n/a" if ood[t][e] is None else f"{100 * ood[t][e]:.1f}" for t in task_names] for e, v in mrr(ood).items()])
    panels = {}
    for t in task_names:
        series = {e: [r["rows"] for r in by[t, e]] for e in encs if by[t, e]}
        panels[t] = {e: [mean_std(at(seeds, n))[0] for n in lengths] for e, seeds in series.items()}
        plot_accuracy(os.path.join(out, f"{t}.png"), series, lengths, train_len, f"{t}: accuracy against length")
        md += ["", f"## {t}", "", *tables(series, lengths, "Exact match (%, mean ± std over seeds):"),
               f"![{t}]({t}.png)"]
        windows = {e: [effective_window(r["grid"]) for r in by[t, e] if "grid" in r] for e in encs}
        if any(windows.values()):
            md += ["", "Passkey effective context window (PI's 20% rule over every depth; tokens): " + ", ".join(
                f"{e} {fmt(w, '.1f', missing='n/a')}" for e, w in windows.items() if w)]
    if panels:
        plot_heatmap(os.path.join(out, "heatmap.png"), panels, lengths, "exact match, encodings x lengths")
        md += ["", "## Heatmap", "", "![heatmap](heatmap.png)"]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    return os.path.join(out, "report.md")


def write_scores(out, report_dir):
    """task_scores.{json,csv,md,png} (and passkey_grid.{csv,png}) of tasks.score.score_checkpoints'
    result into report_dir; returns the markdown's path."""
    os.makedirs(report_dir, exist_ok=True)
    path, lengths = os.path.join(report_dir, "task_scores"), [r["length"] for r in next(iter(out["runs"].values()))["rows"]]
    series = {f"{d} ({run['encoding']})": [run["rows"]] for d, run in out["runs"].items()}
    with open(path + ".json", "w") as f:
        json.dump(out, f, indent=1)
    write_csv(path + ".csv", [dict(out_dir=d, encoding=run["encoding"], **r) for d, run in out["runs"].items()
                              for r in run["rows"]])
    title = f"{out['task']}: trained at length <= {out['train_len']}, {out['samples']} samples per point"
    md = [f"# {title}", "", *tables(series, lengths), "![accuracy](task_scores.png)"]
    plot_accuracy(path + ".png", series, lengths, out["train_len"], title)
    for d, run in out["runs"].items():
        if "grid" in run:
            gpath = os.path.join(report_dir, f"passkey_grid{'' if len(out['runs']) == 1 else '_' + os.path.basename(d)}")
            write_csv(gpath + ".csv", run["grid"])
            md += ["", f"{d}: passkey effective context window {run['effective_window']} tokens "
                   f"(PI's rule: the largest length with >= 20% retrieval at every length up to it, every depth)"]
            depths = sorted({r["depth"] for r in run["grid"]})
            panel = {f"depth {dp:g}": [next(r["exact"] for r in run["grid"] if r["length"] == n and r["depth"] == dp)
                                       for n in lengths] for dp in depths}
            plot_heatmap(gpath + ".png", {d: panel}, lengths, "passkey retrieval, length x depth")
            md += [f"![grid]({os.path.basename(gpath)}.png)"]
    with open(path + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    return path + ".md"
