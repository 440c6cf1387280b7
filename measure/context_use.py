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
"""
import csv
import math
import os

import numpy as np

from measure.evaluation import MULTIPLES, TOKENS_PER_POINT, window_losses

SEQUENCES = 32            # sequences of length 16 L averaged by per_position_loss


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


def write_per_position(curves, report_dir, train_len=None):
    """per_position.csv (run, position, loss) and per_position.png (log-x: each position thin,
    log-spaced bins thick) into report_dir. curves: {label: (T,) tensor}. Returns their paths."""
    os.makedirs(report_dir, exist_ok=True)
    paths = {k: os.path.join(report_dir, f"per_position.{k}") for k in ("csv", "png")}
    with open(paths["csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "position", "loss"])
        for label, curve in curves.items():
            w.writerows([label, t, f"{v:.6f}"] for t, v in enumerate(curve.tolist()))
    from positional.plot import figure
    with figure(paths["png"], train_len=train_len, xscale="log", xlabel="position in the sequence (1-based)",
                ylabel="mean loss (nats); thin: each position, thick: log-spaced bins",
                title="Loss at each position") as ax:
        for label, curve in curves.items():
            line, = ax.plot(np.arange(1, len(curve) + 1), curve.numpy(), alpha=0.25, linewidth=0.7)  # log-x: from 1
            edges = np.unique(np.geomspace(1, len(curve) + 1, 40).astype(int))
            bins = [(a, b) for a, b in zip(edges[:-1], edges[1:]) if b > a]
            ax.plot([np.sqrt(a * (b - 1)) for a, b in bins], [curve[a - 1:b - 1].mean().item() for a, b in bins],
                    color=line.get_color(), label=label)
    return paths
