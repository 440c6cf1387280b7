"""Does a model use the context it is given? Flat perplexity past the training length L does
not show that the far tokens help (Press et al. 2022, https://arxiv.org/abs/2108.12409,
appendix B: sliding-window perplexity that does not improve with more context).

context gain   The same targets scored by windows of C = L, 2L, ... 16L tokens that advance by
               one stride S <= L, each scoring its last S targets: every target sees between
               C - S + 1 and C tokens, so only the context grows.
                   gain(C) = ppl(context L) / ppl(context C)
               Above 1: the extra context helps. Exactly 1 when the model cannot see past
               C - S + 1 tokens (a window w of attention with n_layer (w - 1) + 1 <= L - S + 1).
per-position   The mean loss at each position t of non-overlapping sequences of T = 16 L tokens:
loss           where extrapolation breaks. Its mean is the non-overlapping loss at length T.
in-range       The positive control: the same n targets, spread evenly over the tokens after the
context curve  longest context measured, each predicted from exactly c tokens before it (the last
               position of a window of c tokens ending at the target), for c = 8, 16, 32, ..., L_own
               (the model's own training length). A model that uses the context it was trained on
               has a loss that falls with c up to L_own; past L, a model trained at a longer length
               (compare.py's context_reference) shows what gain from context looks like in range.
"""
import csv
import math
import os

import numpy as np
from matplotlib.ticker import NullFormatter

from measure.encoding_plots import figure, save
from measure.evaluation import MULTIPLES, TOKENS_PER_POINT, window_losses
from measure.tables import fmt, md_table, palette, write_csv

import matplotlib.pyplot as plt  # noqa: E402  (after encoding_plots, which picks the Agg backend)

SEQUENCES = 32            # sequences of length 16 L averaged by per_position_loss
SHORTEST = 8              # the in-range curve's shortest context
PER_PANEL = 6             # curves per panel of the in-range figure (and the reference in each)


def context_gain(model, tokens, base_len, multiples=MULTIPLES, stride=0, scored_tokens=TOKENS_PER_POINT,
                 device="cpu"):
    """Rows {"context", "stride", "tokens", "loss", "ppl", "gain"}, one per context C =
    m * base_len, all scoring the same targets. stride: default base_len // 2, in [1, base_len].
    Contexts past the encoding's positions get nan rows."""
    stride = stride or max(1, base_len // 2)
    if not 1 <= stride <= base_len:
        raise ValueError(f"context gain stride must be in [1, {base_len}] (the shortest context), got {stride}")
    contexts = sorted({m * base_len for m in multiples})
    if contexts[0] != base_len:
        raise ValueError(f"context gain is measured against context {base_len}: multiples must include 1")
    longest = contexts[-1]
    windows = min(math.ceil(scored_tokens / stride), (len(tokens) - 1 - longest) // stride + 1)
    if windows < 1:
        raise ValueError(f"context gain at {longest} tokens needs at least {longest + 1} tokens, got {len(tokens)}")
    ends = [longest + k * stride for k in range(windows)]     # the same targets for every context
    rows = []
    for c in contexts:
        if model.max_positions is not None and c > model.max_positions:
            rows.append(dict(context=c, stride=stride, tokens=0, loss=math.nan, ppl=math.nan))
            continue
        nll = window_losses(model, tokens, [e - c for e in ends], c, device)[:, -stride:]
        loss = nll.mean().item()
        rows.append(dict(context=c, stride=stride, tokens=nll.numel(), loss=loss, ppl=math.exp(min(loss, 700))))
    for r in rows:
        r["gain"] = rows[0]["ppl"] / r["ppl"]
    return rows


def per_position_loss(model, tokens, length, sequences=SEQUENCES, device="cpu"):
    """(curve, n): curve (length,) float64, the mean loss at each position of n
    non-overlapping sequences of `length` tokens taken from the start of `tokens`."""
    n = min(sequences, (len(tokens) - 1) // length)
    if n < 1:
        raise ValueError(f"per-position loss at length {length} needs at least {length + 1} tokens, got {len(tokens)}")
    if model.max_positions is not None and length > model.max_positions:
        raise ValueError(f"the {model.pos_name} encoding knows {model.max_positions} positions; per-position loss at "
                         f"{length} needs an encoding without a limit")
    return window_losses(model, tokens, [k * length for k in range(n)], length, device).mean(0), n


def in_range_contexts(train_len, shortest=SHORTEST):
    """The contexts of the in-range curve: shortest, 2 shortest, 4 shortest, ... below train_len, then train_len."""
    out = []
    while shortest < train_len:
        out.append(shortest)
        shortest *= 2
    return out + [train_len]


def curve_targets(n_tokens, n, start):
    """n distinct target indices spread evenly over [start, n_tokens): each has at least start tokens before it."""
    if n < 1 or n_tokens - start < n:
        raise ValueError(f"the in-range context curve needs {n} targets after the first {start} tokens, got "
                         f"{n_tokens} tokens; score fewer targets (compare.py's context_targets) or use a longer split")
    return start + np.arange(n) * (n_tokens - 1 - start) // max(1, n - 1)


def context_curve(model, tokens, contexts, targets, device="cpu"):
    """Rows {"context", "tokens", "loss", "ppl"}, one per context c: the mean loss of the targets (token
    indices), each predicted from exactly the c tokens before it, at positions 0 .. c - 1."""
    if min(targets) < max(contexts):
        raise ValueError(f"target {min(targets)} has fewer than {max(contexts)} tokens before it")
    rows = []
    for c in contexts:
        nll = window_losses(model, tokens, [t - c for t in targets], c, device)[:, -1]   # (n,): the last position
        loss = nll.mean().item()
        rows.append(dict(context=c, tokens=len(nll), loss=loss, ppl=math.exp(min(loss, 700))))
    return rows


def in_range_curve(model, tokens, train_len, targets, start=0, device="cpu"):
    """context_curve at contexts 8, 16, ..., train_len (the model's own training length) of `targets`
    targets spread over the tokens after the first max(start, train_len)."""
    at = curve_targets(len(tokens), targets, max(start, train_len))
    return context_curve(model, tokens, in_range_contexts(train_len), at, device)


def measure(model, tokens, base_len, gain=True, per_position=True, scored_tokens=TOKENS_PER_POINT,
            sequences=SEQUENCES, device="cpu"):
    """{"gain": context_gain rows or None, "curve": per_position_loss curve at 16 base_len over
    `sequences` sequences, or None (also where the positions end before that)}. The caller sets autocast."""
    fits = model.max_positions is None or model.max_positions >= 16 * base_len
    rows = context_gain(model, tokens, base_len, scored_tokens=scored_tokens, device=device) if gain else None
    curve = per_position_loss(model, tokens, 16 * base_len, sequences, device)[0] if per_position and fits else None
    return {"gain": rows, "curve": curve}


# ---- reports -------------------------------------------------------------------------
def gain_table_lines(rows_by_label):
    """Markdown: one line per label, ppl and gain per context. rows_by_label: {label: rows}."""
    contexts = sorted({r["context"] for rows in rows_by_label.values() for r in rows})
    lines = ["| run | " + " | ".join(f"ppl@{c} (gain)" for c in contexts) + " |", "|---|" + "---|" * len(contexts)]
    for label, rows in rows_by_label.items():
        by = {r["context"]: r for r in rows}
        cells = ["n/a" if c not in by or math.isnan(by[c]["ppl"]) else f"{by[c]['ppl']:.3f} ({by[c]['gain']:.3f})"
                 for c in contexts]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def write_context_gain(rows_by_label, report_dir):
    """context_gain.csv and .md into report_dir; returns their paths."""
    os.makedirs(report_dir, exist_ok=True)
    paths = {k: os.path.join(report_dir, f"context_gain.{k}") for k in ("csv", "md")}
    with open(paths["csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "context", "stride", "tokens", "loss", "ppl", "gain"])
        w.writerows([label, r["context"], r["stride"], r["tokens"], f"{r['loss']:.6f}", f"{r['ppl']:.6f}",
                     f"{r['gain']:.6f}"] for label, rows in rows_by_label.items() for r in rows)
    with open(paths["md"], "w") as f:
        f.write("\n".join(["## Context gain: ppl(context L) / ppl(context C), the same targets", "",
                           *gain_table_lines(rows_by_label), ""]))
    return paths


def log_bins(n, count=40):
    """[(first, last)]: positions 1 .. n (1-based, both ends included) in at most count - 1 log-spaced bins."""
    edges = np.unique(np.geomspace(1, n + 1, count).astype(int))
    return [(a, b - 1) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def write_per_position(curves, report_dir, train_len=None, binned=False):
    """per_position.csv (run, position, loss; binned: run, first, last, loss, the mean over the log-spaced bins
    of the figure's thick lines) and per_position.png (log-x: each position thin, log-spaced bins thick) into
    report_dir. curves: {label: (T,) tensor}. Returns their paths."""
    os.makedirs(report_dir, exist_ok=True)
    paths = {k: os.path.join(report_dir, f"per_position.{k}") for k in ("csv", "png")}
    with open(paths["csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "first", "last", "loss"] if binned else ["run", "position", "loss"])
        for label, curve in curves.items():
            if binned:
                w.writerows([label, a, b, f"{curve[a - 1:b].mean().item():.6f}"] for a, b in log_bins(len(curve)))
            else:
                w.writerows([label, t, f"{v:.6f}"] for t, v in enumerate(curve.tolist()))
    colors = palette(curves)                      # distinct for up to 20 curves (tab10 repeats from the 11th)
    with figure(paths["png"], train_len=train_len, xscale="log", xlabel="position in the sequence (1-based)",
                ylabel="mean loss (nats); thin: each position, thick: log-spaced bins",
                title="Loss at each position") as ax:
        for label, curve in curves.items():
            line, = ax.plot(np.arange(1, len(curve) + 1), curve.numpy(), alpha=0.25, linewidth=0.7,
                            color=colors[label])  # log-x: from 1
            bins = log_bins(len(curve))
            ax.plot([np.sqrt(a * b) for a, b in bins], [curve[a - 1:b].mean().item() for a, b in bins],
                    color=line.get_color(), label=label)
    return paths


def panels(labels):
    """The labels in panels of at most PER_PANEL, in order, those of one encoding (the name before '+'
    or ' ') together where they fit, its fine-tunes (" ftN") apart from the rest."""
    groups = {}
    for label in labels:
        groups.setdefault((label.split("+")[0].split(" ")[0], " ft" in label), []).append(label)
    out = []
    for group in groups.values():
        for i in range(0, len(group), PER_PANEL):
            chunk = group[i:i + PER_PANEL]
            if out and len(out[-1]) + len(chunk) <= PER_PANEL:
                out[-1] += chunk
            else:
                out.append(chunk)
    return out or [[]]


def plot_in_range(path, curves, train_len, reference=""):
    """Small multiples of loss against context, log-2 x with a tick at each context: per label the seeds'
    mean and min-max band; the reference (grey, dashed) in every panel; L dotted. curves: {label:
    (contexts, (contexts, seeds) array of losses)}."""
    groups = panels([label for label in curves if label != reference])
    cols = min(2, len(groups))
    rows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.6 * cols, 3.3 * rows), sharey=True, squeeze=False)
    ticks = sorted({c for cs, _ in curves.values() for c in cs})
    for ax, group in zip(axes.flat, groups):
        for label in group + [reference] * bool(reference):
            cs, v = curves[label]
            style = dict(color="grey", ls="--") if label == reference else {}
            line, = ax.plot(cs, np.nanmean(v, 1), marker="o", ms=3, lw=1.2,
                            label=label + " (reference)" * (label == reference), **style)
            if v.shape[1] > 1:
                ax.fill_between(cs, np.nanmin(v, 1), np.nanmax(v, 1), color=line.get_color(), alpha=0.2)
        ax.axvline(train_len, color="grey", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(c) for c in ticks], fontsize=7)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(ticks[0] / 1.25, ticks[-1] * 1.25)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside the panel: never on a curve
        ax.set_xlabel("context c (tokens before the target)", fontsize=8)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("loss (nats)")
    fig.suptitle(f"Loss at the same targets against context (dotted: the training length L = {train_len})", fontsize=10)
    return save(fig, path)


def write_in_range(runs_by_label, report_dir, train_len):
    """compare.py's in-range curves: context_curve.csv and .png into report_dir; -> the report's markdown
    lines ([] when no run measured one). runs_by_label: {label: [per seed: {"seed", "in_range": context_curve
    rows, "reference": whether the label is the run trained past L}]}."""
    runs = {label: [r for r in rs if r.get("in_range")] for label, rs in runs_by_label.items()}
    runs = {label: rs for label, rs in runs.items() if rs}
    if not runs:
        return []
    os.makedirs(report_dir, exist_ok=True)
    write_csv(os.path.join(report_dir, "context_curve.csv"), [
        dict(label=label, seed=r["seed"], **row) for label, rs in runs.items() for r in rs for row in r["in_range"]])
    curves = {label: ([row["context"] for row in rs[0]["in_range"]],     # the seeds of a label share its contexts
                      np.array([[row["loss"] for row in r["in_range"]] for r in rs]).T) for label, rs in runs.items()}
    reference = next((label for label, rs in runs.items() if rs[0].get("reference")), "")
    plot_in_range(os.path.join(report_dir, "context_curve.png"), curves, train_len, reference)
    contexts = sorted({c for cs, _ in curves.values() for c in cs})

    def ratio(label, a, b):
        """ppl(c = a) / ppl(c = b) of each seed, or '—' where the label has no such context."""
        cs, v = curves[label]
        return fmt(np.exp(v[cs.index(a)] - v[cs.index(b)]).tolist(), ".3f") if a in cs and b in cs else "—"

    table = md_table(["label"] + [f"loss, c = {c}" for c in contexts] + [
        f"ppl({contexts[0]}) / ppl({train_len})", f"past L: ppl({train_len}) / ppl(own length)"], [
        [label] + [fmt(v[cs.index(c)].tolist() if c in cs else [], ".3f") for c in contexts]
        + [ratio(label, cs[0], train_len), ratio(label, train_len, cs[-1]) if cs[-1] > train_len else "—"]
        for label, (cs, v) in curves.items()])
    s = curves[reference][0][-1] / train_len if reference else 0
    note = (f"{reference} is trained with sequences of {s:g} L tokens, {s:g} times fewer of them per iteration "
            f"(rounded), for as many iterations as the others (compare.py --context_reference): its gain past L, in "
            f"its own range (last column), is what using context past L looks like, beside the context gain above "
            f"of the models run past their training length." if reference else
            "No model was trained past L as a reference (compare.py --context_reference).")
    targets = next(iter(runs.values()))[0]["in_range"][0]["tokens"]
    return ["### In-range context curve: the positive control", "",
            f"Loss (nats) at the same {targets:,} validation targets for every row and context c, each target "
            f"predicted from exactly the c tokens before it (a window of c tokens ending at it, positions 0 to "
            f"c - 1), for c = {', '.join(map(str, contexts))} up to the row's own training length; mean ± std over "
            f"seeds ([context_curve.csv](context_curve.csv)). A model that uses the context it was trained on has a "
            f"loss that falls as c grows to its training length. " + note, "", *table, "",
            "![context_curve](context_curve.png)", ""]
