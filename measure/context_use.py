"""Does a model use the context it is given? Two measures on a model and a token stream.

Flat perplexity past the training length L does not show that the far tokens help: the
ALiBi paper's own appendix (Press et al. 2022, https://arxiv.org/abs/2108.12409,
appendix B) finds sliding-window perplexity that does not improve with more context.

context gain   The same targets are scored with windows of C = L, 2L, ... 16L tokens
               that advance by one fixed stride S <= L; each window scores its last S
               targets. Every scored target then sees between C - S + 1 and C tokens
               (itself included): only the context grows, never the set of targets.
                   gain(C) = ppl(context L) / ppl(context C)
               Above 1: the extra context helps. Exactly 1 when the model cannot see past
               C - S + 1 tokens (a window w of attention with n_layer (w - 1) + 1 <= L - S + 1).
per-position   The mean loss at each position t = 0 .. T-1 of non-overlapping sequences of
loss           T = 16 L tokens: the curve that shows where extrapolation breaks. Its mean
               over t is the non-overlapping loss at length T (every position has the
               same count).

Only a model (model(idx) -> (logits, _)) and a 1-D token sequence are needed; targets
are the tokens shifted by one. Callers choose the tokens (e.g. the validation split).
"""
import csv
import math
import os

import numpy as np
import torch
from torch.nn import functional as F

MULTIPLES = (1, 2, 4, 8, 16)
SCORED_TOKENS = 8192      # targets scored per context length
SEQUENCES = 32            # sequences of length 16 L averaged by per_position_loss
BATCH_TOKENS = 4096       # tokens per forward pass


def _as_long(tokens, n):
    return torch.from_numpy(np.asarray(tokens[:n]).astype(np.int64))


@torch.no_grad()
def window_losses(model, tokens, ends, length, last, device="cpu", batch_tokens=BATCH_TOKENS):
    """(len(ends), last) losses: the window of `length` inputs ending before each end in
    `ends` predicts its targets; the last `last` targets of each window are returned."""
    x = _as_long(tokens, max(ends) + 1)
    per_batch = max(1, batch_tokens // length)
    out = []
    for b in range(0, len(ends), per_batch):
        chunk = ends[b:b + per_batch]
        xb = torch.stack([x[e - length:e] for e in chunk]).to(device)                 # (b, C)
        yb = torch.stack([x[e - length + 1:e + 1] for e in chunk]).to(device)         # (b, C)
        logits, _ = model(xb)                                                          # (b, C, V)
        nll = F.cross_entropy(logits[:, -last:].float().transpose(1, 2), yb[:, -last:], reduction="none")
        out.append(nll.double().cpu())                                                 # (b, last)
    return torch.cat(out)


def context_gain(model, tokens, base_len, multiples=MULTIPLES, stride=0, scored_tokens=SCORED_TOKENS,
                 device="cpu", batch_tokens=BATCH_TOKENS):
    """Rows {"context", "stride", "tokens", "loss", "ppl", "gain"}, one per context C =
    m * base_len, all scoring the same targets. stride: default base_len // 2, in [1, base_len].
    Contexts past the encoding's position table get nan rows."""
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
    limit = model.max_positions
    rows = []
    for c in contexts:
        if limit is not None and c > limit:
            rows.append(dict(context=c, stride=stride, tokens=0, loss=float("nan"), ppl=float("nan")))
            continue
        nll = window_losses(model, tokens, ends, c, stride, device, batch_tokens)
        loss = nll.mean().item()
        rows.append(dict(context=c, stride=stride, tokens=nll.numel(), loss=loss, ppl=math.exp(min(loss, 700))))
    for r in rows:
        r["gain"] = rows[0]["ppl"] / r["ppl"]
    return rows


def per_position_loss(model, tokens, length, sequences=SEQUENCES, device="cpu", batch_tokens=BATCH_TOKENS):
    """(curve, n): curve (length,) float64, the mean loss at each position of n
    non-overlapping sequences of `length` tokens taken from the start of `tokens`."""
    n = min(sequences, (len(tokens) - 1) // length)
    if n < 1:
        raise ValueError(f"per-position loss at length {length} needs at least {length + 1} tokens, got {len(tokens)}")
    limit = model.max_positions
    if limit is not None and length > limit:
        raise ValueError(f"the {model.pos_name} encoding knows {limit} positions; per-position loss at {length} "
                         f"needs an encoding without a limit")
    ends = [(k + 1) * length for k in range(n)]
    return window_losses(model, tokens, ends, length, length, device, batch_tokens).mean(0), n


def measure(model, tokens, base_len, gain=True, per_position=True, scored_tokens=SCORED_TOKENS,
            sequences=SEQUENCES, device="cpu"):
    """{"gain": context_gain rows or None, "curve": per_position_loss curve at 16 base_len over
    `sequences` sequences, or None}: both measures of one model; the curve is None where the
    encoding's positions end before 16 base_len. The caller sets autocast as it likes."""
    limit = model.max_positions
    rows = context_gain(model, tokens, base_len, scored_tokens=scored_tokens, device=device) if gain else None
    fits = limit is None or limit >= 16 * base_len
    curve = (per_position_loss(model, tokens, 16 * base_len, sequences, device)[0]
             if per_position and fits else None)
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
        for label, rows in rows_by_label.items():
            for r in rows:
                w.writerow([label, r["context"], r["stride"], r["tokens"], f"{r['loss']:.6f}", f"{r['ppl']:.6f}",
                            f"{r['gain']:.6f}"])
    with open(paths["md"], "w") as f:
        f.write("\n".join(["## Context gain: ppl(context L) / ppl(context C), the same targets", "",
                           *gain_table_lines(rows_by_label), ""]))
    return paths


def write_per_position(curves, report_dir, train_len=None):
    """per_position.csv (run, position, loss) and per_position.png (log-x, the training
    length marked) into report_dir. curves: {label: (T,) tensor}. Returns their paths."""
    os.makedirs(report_dir, exist_ok=True)
    paths = {k: os.path.join(report_dir, f"per_position.{k}") for k in ("csv", "png")}
    with open(paths["csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "position", "loss"])
        for label, curve in curves.items():
            w.writerows([label, t, f"{v:.6f}"] for t, v in enumerate(curve.tolist()))
    plot_per_position(curves, paths["png"], train_len)
    return paths


def plot_per_position(curves, path, train_len=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10, 5))
    for label, curve in curves.items():
        t = np.arange(1, len(curve) + 1)                         # position t + 1: log-x needs > 0
        line, = ax.plot(t, curve.numpy(), alpha=0.25, linewidth=0.7)
        edges = np.unique(np.geomspace(1, len(curve) + 1, 40).astype(int))   # log-spaced bins
        mids = [np.sqrt(a * (b - 1)) for a, b in zip(edges[:-1], edges[1:]) if b > a]
        means = [curve[a - 1:b - 1].mean().item() for a, b in zip(edges[:-1], edges[1:]) if b > a]
        ax.plot(mids, means, color=line.get_color(), label=label)
    if train_len:
        ax.axvline(train_len, color="grey", linestyle=":", label=f"training length {train_len}")
    ax.set_xscale("log")
    ax.set_xlabel("position in the sequence (1-based)")
    ax.set_ylabel("mean loss (nats); thin: each position, thick: log-spaced bins")
    ax.set_title("Loss at each position")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
