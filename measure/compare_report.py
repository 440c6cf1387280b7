"""The report folder of compare.py: report.md, runs.csv, eval.csv and PNG plots, built from
each run's log.jsonl (written by train.py) and results.json (written by compare.py).

Several seeds of one encoding are summarised as mean ± sample standard deviation; the
plots draw the mean with a min-max band.
"""
import csv
import datetime
import json
import math
import os
import platform
import subprocess

import matplotlib
import matplotlib.ticker

import positional
from model import GPTConfig
from positional.plot import (bias_by_distance, draw_bias_per_head, draw_expected_logits, draw_rope_angles,
                             draw_rope_decay, draw_similarity, position_table)
from training import checkpoint

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAPTIONS = {
    "val_loss": "Validation loss against tokens seen, every run.",
    "ppl_vs_length": "Perplexity against evaluation length (dashed: RoPE extension methods, no retraining).",
    "rope_decay": "RoPE's long-range decay bound (RoFormer section 3.4.3), d = 128, for several bases.",
    "rope_angles": "RoPE rotation angles, and how each extension method rescales each frequency.",
    "expected_logits": "Expected attention logit against distance for identical random q = k.",
}


def read_log(run_dir):
    """Training metrics of one run from its log.jsonl. A resumed run has several segments
    (one per process, each starting with a 'start' row): wall time is their sum, and a
    step logged twice (redone after an interruption) keeps its latest value."""
    path = os.path.join(run_dir, "log.jsonl")
    rows = []
    if os.path.exists(path):  # absent for a run trained before train.py wrote it: metrics show as '—'
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    wall, seg_end, params = 0.0, 0.0, None
    evals, speeds = {}, []
    for row in rows:
        if row["event"] == "start":
            wall, seg_end = wall + seg_end, 0.0
            params = row.get("params", params)
        seg_end = row["elapsed"]
        if row["event"] == "eval":
            evals[row["iter"]] = row
        elif row["event"] == "train":
            speeds.append(row["tokens_per_sec"])
    curve = [(evals[it]["tokens"], evals[it]["val_loss"]) for it in sorted(evals)]
    last = evals[max(evals)] if evals else {}
    speeds = sorted(speeds[1:] or speeds)  # the first interval includes warm-up
    return dict(params=params, train_loss=last.get("train_loss", math.nan), val_loss=last.get("val_loss", math.nan),
                val_bpb=last.get("val_bpb", math.nan),
                tokens_per_sec=speeds[len(speeds) // 2] if speeds else math.nan, wall_s=wall + seg_end, curve=curve)


def mean_std(values):
    """(mean, sample standard deviation) of the values that are there (None and NaN are not);
    (None, None) when none is. The one summary of seeds in every report."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None, None
    m = sum(vals) / len(vals)
    return m, (math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0)


def fmt(values, spec, scale=1, missing="—"):
    """A table cell: "mean ± std" of the values (times scale), the mean alone for one value, `missing` for none."""
    m, sd = mean_std(values)
    if m is None:
        return missing
    n = len([v for v in values if v is not None and not math.isnan(v)])
    return f"{scale * m:{spec}}" + (f" ± {scale * sd:{spec}}" if n > 1 else "")


# ---- what each encoding does (also python -m measure.plots) -----------------------------
def build_untrained(name, head_dim, n_head, length):
    """An encoding from the registry, built for head_dim x n_head and `length` positions."""
    return positional.build(GPTConfig(block_size=length, n_head=n_head, n_embd=head_dim * n_head, pos_encoding=name))


def load_trained(out_dir):
    """(label, (encoding, head_dim)) of a checkpoint written by train.py (checkpoint.load_model)."""
    model, _ = checkpoint.load_model(out_dir)
    return f"{model.pe.name} (trained)", (model.pe.eval(), model.config.n_embd // model.config.n_head)


def draw_all(out, head_dim=128, n_head=8, length=1024, bases=(1e4, 1e5, 1e6), checkpoints=(), factor=4.0):
    """Every figure into folder `out`; returns {figure name: path}. Encodings with
    parameters are drawn only from trained checkpoints (an untrained table says nothing).
    The RoPE angle plot extends a training length of length / factor to `length`."""
    train_len = max(1, round(length / factor))
    paths = {"rope_decay": draw_rope_decay(os.path.join(out, "rope_decay.png"), head_dim, length, bases),
             "rope_angles": draw_rope_angles(os.path.join(out, "rope_angles.png"), head_dim, bases[0],
                                             train_len, factor)}
    fixed = {}
    for name in positional.REGISTRY:
        pe = build_untrained(name, head_dim, n_head, length)
        if not any(True for _ in pe.parameters()):
            fixed[name] = (pe, head_dim)
    trained = dict(load_trained(d) for d in checkpoints)
    trained = {k: v for k, v in trained.items() if any(True for _ in v[0].parameters())}  # fixed ones: drawn above
    every = {**fixed, **trained}
    unbounded = {k: v for k, v in every.items() if v[0].max_positions is None or v[0].max_positions >= length}
    paths["expected_logits"] = draw_expected_logits(os.path.join(out, "expected_logits.png"), unbounded, length)
    for label, (pe, _) in every.items():
        slug = label.split(" ")[0] + ("_trained" if label in trained else "")
        n = min(length, pe.max_positions or length)
        bias = bias_by_distance(pe, n)
        if bias is not None:
            paths[f"{slug}_bias"] = draw_bias_per_head(os.path.join(out, f"{slug}_bias.png"), bias,
                                                       f"{label}: bias per head against distance")
        table = position_table(pe, min(n, 256))
        if table is not None:
            paths[f"{slug}_similarity"] = draw_similarity(os.path.join(out, f"{slug}_similarity.png"), table,
                                                          f"{label}: cosine similarity of positions")
    return paths


def git_commit():
    """The commit of this code, "-dirty" with uncommitted changes; "unknown" outside git."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40", "--exclude=*"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def collect(results):
    """-> (labels in order, {label: [per-seed dict(seed, metrics, ppl={length: ppl})]})."""
    labels, by_label = [], {}
    for r in results:
        metrics = read_log(r["run_dir"])
        ppl = {}
        for row in r["rows"]:
            ppl.setdefault(row["label"], {})[row["length"]] = row["ppl"]
        for label, by_len in ppl.items():
            if label not in by_label:
                labels.append(label)
                by_label[label] = []
            by_label[label].append(dict(seed=r["seed"], encoding=r["encoding"], metrics=metrics, ppl=by_len,
                                        main=label == r["encoding"]))
    return labels, by_label


def palette(encodings):
    """{encoding: colour}, distinct for up to 20 encodings."""
    names = list(dict.fromkeys(encodings))
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}


def plot_val_loss(path, results):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colors, seen = palette(r["encoding"] for r in results), set()
    for r in results:
        curve = read_log(r["run_dir"])["curve"]
        color = colors[r["encoding"]]
        ax.plot([t for t, _ in curve], [v for _, v in curve], color=color, lw=1,
                label=None if r["encoding"] in seen else r["encoding"])
        seen.add(r["encoding"])
    ax.set(xlabel="tokens seen", ylabel="validation loss", title="Validation loss against tokens seen")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_ppl(path, labels, by_label, lengths, train_len):
    """One colour per encoding; its RoPE extension methods in the same colour, dashed."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors, dashes = palette(by_label[label][0]["encoding"] for label in labels), {}
    for label in labels:
        seeds = by_label[label]
        per_seed = torch.tensor([[s["ppl"].get(L, math.nan) for L in lengths] for s in seeds])  # (S, n)
        mean = per_seed.nanmean(0)
        color = colors[seeds[0]["encoding"]]
        k = dashes[color] = dashes.get(color, -1) + (0 if seeds[0]["main"] else 1)
        style = "-" if seeds[0]["main"] else ["--", ":", "-."][k % 3]
        if torch.isnan(mean).all():
            continue
        ax.plot(lengths, mean.numpy(), style, marker="o", ms=3, lw=1.2, color=color, label=label)
        if len(per_seed) > 1:
            lo, hi = per_seed.min(0).values.numpy(), per_seed.max(0).values.numpy()
            ax.fill_between(lengths, lo, hi, color=color, alpha=0.2)
    ax.axvline(train_len, color="grey", ls=":", label="training length")
    ax.set(xscale="log", yscale="log", xlabel="evaluation length (tokens)", ylabel="validation perplexity",
           title="Perplexity against evaluation length")
    ax.set_xticks(lengths, [str(L) for L in lengths])
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def finetune_lines(labels, by_label, length, notes=None):
    """Markdown: for each encoding with fine-tuned rows, ppl at `length` (the fine-tuning
    length s L) of each method without and with fine-tuning, and of the direct fine-tune
    (PI's control), mean ± std over seeds. notes: {label: what follows its method's name}."""
    notes = notes or {}
    at = lambda label: [s["ppl"].get(length, math.nan) for s in by_label.get(label, [])]  # noqa: E731
    lines = []
    for enc in [label[:-len("+direct ft")] for label in labels if label.endswith("+direct ft")]:
        methods = [label.split("+", 1)[1][:-3] for label in labels
                   if label.startswith(enc + "+") and label.endswith(" ft") and label != f"{enc}+direct ft"]
        lines += [f"| {enc}: method | ppl@{length}, no fine-tune | ppl@{length}, fine-tuned | "
                  f"direct fine-tune (no scaling) |", "|---|---|---|---|",
                  f"| none | {fmt(at(enc), '.2f')} | — | {fmt(at(enc + '+direct ft'), '.2f')} |"]
        lines += [f"| {m}{notes.get(f'{enc}+{m} ft', '')} | {fmt(at(f'{enc}+{m}'), '.2f')} | "
                  f"{fmt(at(f'{enc}+{m} ft'), '.2f')} | |" for m in methods]
        lines.append("")
    if lines:
        lines = ["## Extension methods at the fine-tuning length", "",
                 f"Perplexity at {length} tokens, mean ± std over seeds: each method applied to the pretrained "
                 f"model as it is, and after the short fine-tune at {length} tokens with that method; the direct "
                 f"fine-tune trains at {length} without any scaling (PI's control).", ""] + lines
    return lines


def write_context(results, out, train_len):
    """Context use of the runs that measured it (compare.py --context_use): context_gain.csv,
    per_position.csv and .png (the seeds' mean curve per label) into out; returns
    (markdown lines, {png name: path})."""
    from measure import context_use
    by_label = {}
    for r in results:
        for label, got in (r.get("context") or {}).items():
            by_label.setdefault(label, []).append(dict(got, seed=r["seed"]))
    if not by_label:
        return [], {}
    contexts = sorted({g["context"] for runs in by_label.values() for run in runs for g in run["gain"] or []})
    with open(os.path.join(out, "context_gain.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["label", "seed", "context", "tokens", "loss", "ppl", "gain"])
        w.writerows([label, run["seed"], g["context"], g["tokens"], g["loss"], g["ppl"], g["gain"]]
                    for label, runs in by_label.items() for run in runs for g in run["gain"] or [])
    head = ["label", f"ppl, context {contexts[0]}"] + [f"gain {c}" for c in contexts[1:]]
    lines = ["## Context use", "",
             f"Context gain = ppl(context {contexts[0]}) / ppl(context C): the same validation targets scored with "
             f"windows of C tokens that advance by a fixed stride, so only the context grows (context_use.py). "
             f"Above 1: the longer context helps. Mean ± std over seeds.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, runs in by_label.items():
        at = lambda c, k: [next((g[k] for g in run["gain"] or [] if g["context"] == c), math.nan)  # noqa: E731
                           for run in runs]
        lines.append("| " + " | ".join([label, fmt(at(contexts[0], "ppl"), ".3f")] +
                                       [fmt(at(c, "gain"), ".3f") for c in contexts[1:]]) + " |")
    curves = {label: torch.tensor([run["curve"] for run in runs if run["curve"] is not None]).mean(0)
              for label, runs in by_label.items() if any(run["curve"] is not None for run in runs)}
    pngs = {}
    if curves:
        pngs["per_position"] = context_use.write_per_position(curves, out, train_len)["png"]
        lines += ["", "Mean loss at each position of sequences of 16 x the training length (mean over seeds; "
                  "[per_position.csv](per_position.csv)):", "", "![per_position](per_position.png)"]
    return lines + [""], pngs


def results_table(labels, by_label, lengths, train_len):
    """Markdown: one row per label, training metrics and perplexity at each length."""
    head = ["encoding", "params", "train loss", "val loss", "val bits/byte", "tok/s", "wall"] + [
        f"ppl@{L}" + (" (train)" if L == train_len else "") for L in lengths]
    table = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        seeds = by_label[label]
        ms = [s["metrics"] for s in seeds]
        train_cols = [f"{ms[0]['params'] / 1e6:.3f}M" if ms[0]["params"] else "—",
                      fmt([m["train_loss"] for m in ms], ".4f"), fmt([m["val_loss"] for m in ms], ".4f"),
                      fmt([m["val_bpb"] for m in ms], ".4f"),
                      fmt([m["tokens_per_sec"] for m in ms], ",.0f"), fmt([m["wall_s"] for m in ms], ".0f") + " s"]
        if not seeds[0]["main"]:
            train_cols = ["(same runs)", "", "", "", "", ""]
        table.append("| " + " | ".join([label] + train_cols + [fmt([s["ppl"].get(L, math.nan) for s in seeds], ".2f")
                                                                for L in lengths]) + " |")
    return table


def write(results, failed, settings, cfg, command):
    """Write the report folder; returns {'md', 'runs_csv', 'eval_csv', 'pngs'}."""
    out = settings["report_dir"]
    os.makedirs(out, exist_ok=True)
    lengths = sorted({row["length"] for r in results for row in r["rows"]}) or settings["eval_lengths"]
    labels, by_label = collect(results)

    runs_csv = os.path.join(out, "runs.csv")
    with open(runs_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["label", "encoding", "seed", "params", "train_loss", "val_loss", "val_bpb", "tokens_per_sec", "wall_s"]
                   + [f"ppl@{L}" for L in lengths])
        for label in labels:
            for s in by_label[label]:
                m = s["metrics"]
                w.writerow([label, s["encoding"], s["seed"], m["params"], m["train_loss"], m["val_loss"], m["val_bpb"],
                            m["tokens_per_sec"], m["wall_s"]] + [s["ppl"].get(L, "") for L in lengths])
    eval_csv = os.path.join(out, "eval.csv")
    with open(eval_csv, "w", newline="") as f:
        rows = [dict(row, seed=r["seed"]) for r in results for row in r["rows"]]
        keys = list(dict.fromkeys(k for row in rows for k in row))
        w = csv.DictWriter(f, fieldnames=keys or ["label"])
        w.writeheader()
        w.writerows(rows)

    pngs = {}
    if results:
        pngs["val_loss"] = plot_val_loss(os.path.join(out, "val_loss.png"), results)
        pngs["ppl_vs_length"] = plot_ppl(os.path.join(out, "ppl_vs_length.png"), labels, by_label, lengths,
                                         cfg.block_size)
    if settings.get("plots", True):
        first_seed = [r["run_dir"] for r in results if r["seed"] == settings["seed_list"][0]]
        pngs.update(draw_all(os.path.join(out, "encodings"), length=max(settings["eval_lengths"]),
                             checkpoints=first_seed, factor=settings["rope_factor"]))

    table = results_table(labels, by_label, lengths, cfg.block_size)
    rel = lambda p: os.path.relpath(p, out)  # noqa: E731
    n_seeds = len(settings["seed_list"])
    md = [f"# Positional encoding comparison", "",
          f"- commit: `{git_commit()}`; written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC "
          f"on {platform.machine()} ({os.cpu_count()} CPUs), torch {torch.__version__}",
          f"- recipe: dataset `{cfg.dataset}`, {cfg.n_layer} layers x {cfg.n_head} heads x {cfg.n_embd} wide, "
          f"block_size {cfg.block_size}, {cfg.max_iters} iters x {cfg.batch_size * cfg.block_size:,} tokens "
          f"= {cfg.max_iters * cfg.batch_size * cfg.block_size:,} tokens per run, seeds {settings['seed_list']}",
          f"- evaluation: {settings['eval_mode']} windows, {settings['eval_tokens']:,} tokens per point, "
          f"split val; RoPE extension methods use factor {settings['rope_factor']:g}",
          "", "## Results", "",
          "Loss is per token (nats); bits/byte is the val loss over the UTF-8 bytes of the text (comparable "
          "across tokenizers). " + (f"Values are mean ± std over {n_seeds} seeds. " if n_seeds > 1 else "") +
          f"ppl@L is the perplexity of windows of L tokens; '—' means the run cannot be evaluated there "
          f"(e.g. a position table shorter than L). tok/s is the median training throughput.", "",
          *table, ""]
    if failed:
        md += ["**Failed runs** (rerun the command to retry):", ""]
        md += [f"- {e} seed {s}: {msg}" for e, s, msg in failed]
        md.append("")
    ft_len = round(settings.get("finetune_factor", 0) * cfg.block_size) if settings.get("finetune_iters") else 0
    notes = {row["label"]: f" ({row['trained_params']:,} parameters trained)" for r in results for row in r["rows"]
             if row.get("trained_params")}   # LongLoRA's fine-tune trains adapters, embeddings and norms only
    md += finetune_lines(labels, by_label, ft_len, notes) if ft_len in lengths else []
    context_md, context_pngs = write_context(results, out, cfg.block_size)
    md += context_md
    runs_plots = ("val_loss", "ppl_vs_length")
    figure = lambda name, p: f"{CAPTIONS.get(name, name.replace('_', ' ') + '.')}\n\n![{name}]({rel(p)})\n"  # noqa
    md += ["## Plots", ""] + [figure(name, p) for name, p in pngs.items() if name in runs_plots]
    md += ["## What each encoding does", ""] + [figure(name, p) for name, p in pngs.items() if name not in runs_plots]
    md += ["", "## Commands", "", "```", command, "```", "", "Each run:", "", "```"] + [
        r["command"] for r in results] + ["```", "",
        f"Files: [runs.csv](runs.csv) (one row per run), [eval.csv](eval.csv) (every evaluation point).", ""]
    md_path = os.path.join(out, "report.md")
    with open(md_path, "w") as f:
        f.write("\n".join(md))
    return dict(md=md_path, runs_csv=runs_csv, eval_csv=eval_csv, pngs={**pngs, **context_pngs})
