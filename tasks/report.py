"""Tables and pictures of task scores: one checkpoint's (score_task.py) or a whole
tasks x encodings x seeds comparison's (compare_tasks.py).

Seeds are summarised as mean ± sample standard deviation. The ranking follows Kazemnejad
et al. 2023 (https://arxiv.org/abs/2305.19466, figure 3): in each task the encodings are
ranked by exact-match accuracy averaged over the lengths past the training length (seed
means; ties share the better rank), and an encoding's MRR is the mean of 1/rank over tasks.
"""
import csv
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def mean_std(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return None, None
    m = sum(vals) / len(vals)
    return m, (math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0)


def fmt(values, pct=True):
    m, sd = mean_std(values)
    if m is None:
        return "n/a"
    k = 100 if pct else 1
    return f"{k * m:.1f}" + (f" ± {k * sd:.1f}" if len([v for v in values if v is not None]) > 1 else "")


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def table(series, lengths, key="exact"):
    """Markdown: one row per label, one column per length; cells mean ± std over the label's seeds (%).
    series: {label: [rows of one seed, each {length, exact, token}]}."""
    out = ["| | " + " | ".join(str(n) for n in lengths) + " |", "|---|" + "---|" * len(lengths)]
    for label, seeds in series.items():
        cells = [fmt([next((r[key] for r in rows if r["length"] == n), None) for rows in seeds]) for n in lengths]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot_accuracy(path, series, lengths, train_len, title):
    """Exact match (solid) and per-token accuracy (dotted) against length, log-2 x, training length marked."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = plt.get_cmap("tab10")
    for i, (label, seeds) in enumerate(series.items()):
        for key, style in (("exact", "-"), ("token", ":")):
            pts = [(n, mean_std([next((r[key] for r in rows if r["length"] == n), None) for rows in seeds])[0])
                   for n in lengths]
            pts = [(n, m) for n, m in pts if m is not None]
            ax.plot([n for n, _ in pts], [m for _, m in pts], style, marker="o", ms=3, color=colors(i % 10),
                    label=label if key == "exact" else None)
    ax.axvline(train_len, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="sequence length (tokens)", ylabel="accuracy (solid: exact match, dotted: per token)",
           title=title, ylim=(-0.02, 1.02))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


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
