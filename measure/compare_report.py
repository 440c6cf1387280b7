"""The report folder of compare.py's "lm" suite (report.md, runs.csv, eval.csv and PNG plots, built
from each run's log.jsonl, written by train.py, and its measurements, by compare.py). Several seeds of
one encoding are summarised as mean ± sample standard deviation (measure/tables.py); the plots draw the
mean with a min-max band.
"""
import csv
import datetime
import json
import math
import os
import platform
import subprocess

import matplotlib.ticker
import torch

import positional
from measure import context_use, kept, published, retrieval_probe
from measure.encoding_plots import draw_all, figure
from measure.paired import paired_lines, paired_rows, read_eval, write_evals
from measure.tables import fmt, md_table, mean_std, write_csv
from measure.panels import FAMILIES, draw_seeds, family, fit_panels, length_axis, panel_grid, small_multiples
from positional.rope import RoPESettings
from positional.rope_scaling.effective import effect
from training import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METRICS = ("params", "train_loss", "val_loss", "val_bpb", "tokens_per_sec", "wall_s")   # runs.csv's, from log.jsonl
CAPTIONS = {
    "val_loss": "Validation loss against tokens seen, every run.",
    "ppl_vs_length": "Perplexity against evaluation length, a panel per family and per encoding's extension methods "
                     "(without, then with fine-tuning); L: the training length.",
    "rope_decay": "RoPE's long-range decay bound (RoFormer section 3.4.3), d = 128, for several bases.",
    "rope_angles": "RoPE rotation angles, and how each extension method rescales each frequency.",
    "expected_logits": "Expected attention logit against distance for identical random q = k.",
}


def read_log(run_dir):
    """Training metrics of one run from its log.jsonl; in a kept run's folder (measure/kept.py), the same dict as
    kept in its result.json.gz. A resumed run has a segment per process, each from a 'start' row: wall time is their
    sum; a step logged twice (redone) keeps its latest value."""
    path = os.path.join(run_dir, "log.jsonl")
    summary = None if os.path.exists(path) else kept.summary(run_dir)
    if summary is not None:
        return summary
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


# ---- the lm report ---------------------------------------------------------------------
def git_commit():
    """The commit of this code, "-dirty" with uncommitted changes; "unknown" outside git."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40", "--exclude=*"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def collect(results, baselines=()):
    """{label: [per seed: dict(seed, encoding, metrics, ppl={length: ppl}, main)]}, labels in order, then
    the baselines' rows (measure/ngram.py), one "seed" per label with encoding "ngram" and no metrics."""
    by_label = {}
    for r in results:
        metrics, ppl = read_log(r["dir"]), {}
        for row in r["rows"]:
            ppl.setdefault(row["label"], {})[row["length"]] = row["ppl"]
        for label, by_len in ppl.items():
            by_label.setdefault(label, []).append(dict(seed=r["seed"], encoding=r["encoding"], metrics=metrics,
                                                       ppl=by_len, main=label == r["encoding"]))
    for row in baselines:
        by_label.setdefault(row["label"], [dict(seed="", encoding="ngram", metrics=dict.fromkeys(METRICS, ""), ppl={},
                                                main=False)])[0]["ppl"][row["length"]] = row["ppl"]
    return by_label


def plot_val_loss(path, results):
    """Validation loss against tokens seen, one panel per family: each encoding's mean over seeds (at the
    first seed's evaluation points) with the seeds' min-max band."""
    by_enc = {}
    for r in results:   # a run without a log (trained before train.py wrote one) has no curve
        curve = dict(read_log(r["dir"])["curve"])
        if curve:
            by_enc.setdefault(r["encoding"], []).append(curve)
    groups = {title: [] for title in FAMILIES.values()}
    for enc, curves in by_enc.items():
        tokens = list(curves[0])
        groups[FAMILIES[family(enc)]].append((enc, tokens, [[c.get(t) for c in curves] for t in tokens]))

    def draw(ax, entries):
        for enc, tokens, values in entries:
            draw_seeds(ax, tokens, values, label=enc)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x / 1e6:g}M" if x else "0"))
    return panel_grid(path, fit_panels({k: v for k, v in groups.items() if v}), draw,
                      "Validation loss against tokens seen (mean over seeds, band: min-max)", "tokens seen",
                      "validation loss (nats per token)")


def plot_by_length(path, curves, lengths, train_len, **axes):
    """curves: [(label, [per length: the seeds' values, None where there is none], line style, colour)]:
    the seeds' mean against length (log-2 x), with their min-max band where there are several."""
    with figure(path, (8, 4.5), train_len, **axes) as ax:
        for label, values, style, color in curves:
            draw_seeds(ax, lengths, values, style, color, label)
        length_axis(ax, lengths)
    return path


def plot_ppl(path, by_label, lengths, train_len):
    """Perplexity against length: a panel per family of the encodings as trained (family()), and per encoding
    one for its extension methods without fine-tuning and one fine-tuned, each led by the encoding alone;
    the n-gram rows as baselines."""
    values = {label: [[s["ppl"].get(n) for s in seeds] for n in lengths] for label, seeds in by_label.items()}
    groups, methods, baselines = {title: [] for title in FAMILIES.values()}, {}, {}
    for label, seeds in by_label.items():
        enc = seeds[0]["encoding"]
        if enc == "ngram":
            baselines[label] = [v[0] for v in values[label]]
        elif seeds[0]["main"]:
            groups[FAMILIES[family(enc)]].append((label, values[label]))
        else:   # "rope+yarn" or "rope+yarn ft100" (named "yarn", "yarn ft100")
            name = label[len(enc) + 1:]
            methods.setdefault(enc, {False: [], True: []})[" ft" in name].append((name, values[label]))
    groups, keep = {k: v for k, v in groups.items() if v}, {}
    for enc, by_ft in methods.items():
        for ft, entries in by_ft.items():
            title = f"{enc} + extension method, " + ("fine-tuned" if ft else "no fine-tuning")
            if entries:
                groups[title], keep[title] = [(f"{enc} alone", values.get(enc, []))] + entries, 1
    title = "Perplexity against evaluation length (mean over seeds, band: min-max" + (
        "; dashed grey: n-gram baselines)" if baselines else ")")
    return small_multiples(path, fit_panels(groups, keep), lengths, train_len, baselines, log=True, title=title,
                           xlabel="evaluation length (tokens)", ylabel="validation perplexity (log scale)")


def read_runs(path):
    """collect()'s {label: [per seed]} from a report's runs.csv (perplexities only, no training curves), and
    its evaluation lengths: what redraw needs."""
    with open(path) as f:
        rows = list(csv.DictReader(f))
    by_label = {}
    for row in rows:
        ppl = {int(k[len("ppl@"):]): float(v) for k, v in row.items() if k.startswith("ppl@") and v}
        by_label.setdefault(row["label"], []).append(dict(seed=row["seed"], encoding=row["encoding"], metrics={},
                                                          ppl=ppl, main=row["label"] == row["encoding"]))
    return by_label, [int(k[len("ppl@"):]) for k in rows[0] if k.startswith("ppl@")] if rows else []


def redraw(report_dir, train_len):
    """Draw ppl_vs_length.png of a written report again from its runs.csv (after a change to the figure):
        python -c "from measure.compare_report import redraw; redraw('reports/compare', 256)"   -> its path"""
    by_label, lengths = read_runs(os.path.join(report_dir, "runs.csv"))
    return plot_ppl(os.path.join(report_dir, "ppl_vs_length.png"), by_label, lengths, train_len)


def worse_than_4gram(by_label, train_len):
    """The labels of runs whose mean ppl at the training length is above the 4-gram's there (none without one)."""
    at_l = {label: mean_std([s["ppl"].get(train_len, math.nan) for s in seeds])[0] for label, seeds in by_label.items()
            if seeds[0]["encoding"] != "ngram" or label == "4-gram"}
    ref = at_l.get("4-gram")
    return {label for label, m in at_l.items() if ref is not None and m is not None and m > ref}


def results_table(by_label, lengths, train_len):
    """Markdown: one row per label, training metrics and perplexity at each length; † after a label
    worse than the 4-gram at the training length."""
    worse = worse_than_4gram(by_label, train_len)
    head = ["encoding", "params", "train loss", "val loss", "val bits/byte", "tok/s", "wall"] + [
        f"ppl@{L}" + (" (train)" if L == train_len else "") for L in lengths]
    rows = []
    for label, seeds in by_label.items():
        ms = [s["metrics"] for s in seeds]
        train_cols = ["(count model)" if seeds[0]["encoding"] == "ngram" else "(same runs)", "", "", "", "", ""]
        if seeds[0]["main"]:
            train_cols = [f"{ms[0]['params'] / 1e6:.3f}M" if ms[0]["params"] else "—",
                          *(fmt([m[k] for m in ms], ".4f") for k in ("train_loss", "val_loss", "val_bpb")),
                          fmt([m["tokens_per_sec"] for m in ms], ",.0f"), fmt([m["wall_s"] for m in ms], ".0f") + " s"]
        rows.append([label + " †" * (label in worse)] + train_cols
                    + [fmt([s["ppl"].get(L, math.nan) for s in seeds], ".2f") for L in lengths])
    return md_table(head, rows)


def finetune_lines(by_label, notes, settings, cfg):
    """Markdown: per encoding with fine-tuned rows, ppl at s L (finetune_len) of each method without fine-tuning
    and after each budget of finetune_iters ("<enc>+<method> ftN"); the row "none" holds the run as trained and the
    direct fine-tune (PI's control). notes: {label: what follows its method's name}."""
    length, budgets = settings["finetune_len"], settings["finetune_iters"]
    share = settings["finetune_batch"] * length / (cfg.max_iters * cfg.batch_size * cfg.block_size)   # one iteration
    at = lambda label: fmt([s["ppl"].get(length, math.nan) for s in by_label.get(label, [])], ".2f")  # noqa: E731
    heads = list(dict.fromkeys(label.split(" ")[0] for label in by_label if label.endswith(tuple(
        f" ft{n}" for n in budgets))))   # "rope+direct", "rope+yarn", ...
    lines = []
    for enc in [h[:-len("+direct")] for h in heads if h.endswith("+direct")]:
        methods = [h[len(enc) + 1:] for h in heads if h.startswith(enc + "+") and h != f"{enc}+direct"]
        head = [f"{enc}: method", f"ppl@{length}, no fine-tune"] + [f"ft{n} ({100 * n * share:.2g}% of pretraining)"
                                                                    for n in budgets]
        rows = [["none (direct fine-tune)", at(enc)] + [at(f"{enc}+direct ft{n}") for n in budgets]] + [
            [m + notes.get(f"{enc}+{m} ft{budgets[0]}", ""), at(f"{enc}+{m}")] + [at(f"{enc}+{m} ft{n}")
                                                                                 for n in budgets] for m in methods]
        lines += md_table(head, rows) + [""]
    if lines:
        lines = ["## Extension methods at the fine-tuning length", "",
                 f"Perplexity at {length} tokens, mean ± std over seeds: each method applied to the pretrained "
                 f"model as it is, and after fine-tuning at {length} tokens with that method for N iterations "
                 f"(ftN, with its share of the pretraining tokens); a method's budgets are one fine-tune observed "
                 f"at each. Row none: the run as trained, and the direct fine-tune at {length} without any scaling "
                 f"(PI's control) at the same budgets.", ""] + lines
    return lines


def effective_scale_table(rows, train_len):
    """Markdown lines of positional/rope_scaling/effective.py's rows (one per method and length): a row per
    method, its pairs past L, logit scale and, per length, "scale (reach)"."""
    lengths = list(dict.fromkeys(r["length"] for r in rows))
    head = ["method", "s", f"pairs kept / blended / interpolated at {lengths[-1]}", "logit scale"] + [
        f"{n} ({n / train_len:g}L)" for n in lengths]
    by_method = {}
    for r in rows:
        by_method.setdefault(r["method"], []).append(r)
    return md_table(head, [[m, "—" if math.isnan(rs[0]["factor"]) else f"{rs[0]['factor']:g}",
                            f"{rs[-1]['kept']} / {rs[-1]['blended']} / {rs[-1]['interpolated']} of {rs[-1]['pairs']}",
                            f"{rs[-1]['logit_scale']:.3f}"] + [f"{r['scale']:.3g} ({r['reach']:.2f})" for r in rs]
                           for m, rs in by_method.items()])


def effective_scale_rows(settings, cfg, lengths):
    """effective.py's rows of each RoPE method of the comparison (rope_scalings, at rope_factors' factor or
    rope_factor) at each length, for the rotary channels of the compared rope runs."""
    rope = RoPESettings(**{k: v for k, v in cfg.pos_settings.items() if k in ("rope_base", "rotary_fraction")})
    dim = int(round(cfg.n_embd // cfg.n_head * rope.rotary_fraction))
    return [effect(m, settings["rope_factors"].get(m, settings["rope_factor"]), cfg.block_size, n, dim, rope.rope_base)
            for m in settings["rope_scalings"] for n in lengths]


def effective_scale_lines(settings, cfg, lengths, out):
    """The effective-scale section: effective_scale.csv into out; -> markdown lines ([] without methods)."""
    if not settings.get("rope_scalings"):
        return []
    rows = effective_scale_rows(settings, cfg, lengths)
    write_csv(os.path.join(out, "effective_scale.csv"), rows)
    return ["## What each RoPE method does at each length", "",
            f"Computed from each method's frequencies ([effective_scale.csv](effective_scale.csv); "
            f"positional/rope_scaling/effective.py), {rows[0]['pairs']} frequency pairs, L = {cfg.block_size}. "
            f"Per length: the scale by which the slowest pair is slowed, and in brackets its largest angle there "
            f"over the largest it met in training (above 1: angles never trained). Kept pairs rotate as trained, "
            f"interpolated ones are slowed as much as the slowest, blended ones between.", "",
            *effective_scale_table(rows, cfg.block_size), ""]


def write_context(results, out, train_len):
    """Context use of the runs that measured it (compare.py --context_use): context_gain.csv,
    per_position.csv and .png (the seeds' mean curve per label) into out; -> markdown lines."""
    by_label = {}
    for r in results:
        for label, got in (r.get("context") or {}).items():
            by_label.setdefault(label, []).append(dict(got, seed=r["seed"]))
    if not by_label:
        return []
    write_csv(os.path.join(out, "context_gain.csv"), [
        dict(label=label, seed=run["seed"], **{k: g[k] for k in ("context", "tokens", "loss", "ppl", "gain")})
        for label, runs in by_label.items() for run in runs for g in run["gain"] or []])
    contexts = sorted({g["context"] for runs in by_label.values() for run in runs for g in run["gain"] or []})
    at = lambda runs, c, k: [next((g[k] for g in run["gain"] or [] if g["context"] == c), math.nan)  # noqa: E731
                             for run in runs]
    lines = ["## Context use", "",
             f"Context gain = ppl(context {contexts[0]}) / ppl(context C): the same validation targets scored with "
             f"windows of C tokens that advance by a fixed stride, so only the context grows (context_use.py). "
             f"Above 1: the longer context helps. Mean ± std over seeds.", ""] + md_table(
        ["label", f"ppl, context {contexts[0]}"] + [f"gain {c}" for c in contexts[1:]],
        [[label, fmt(at(runs, contexts[0], "ppl"), ".3f")] + [fmt(at(runs, c, "gain"), ".3f") for c in contexts[1:]]
         for label, runs in by_label.items()])
    curves = {label: torch.tensor([run["curve"] for run in runs if run["curve"] is not None]).mean(0)
              for label, runs in by_label.items() if any(run["curve"] is not None for run in runs)}
    if curves:
        context_use.write_per_position(curves, out, train_len, binned=True)
        lines += ["", "Mean loss at each position of sequences of 16 x the training length (mean over seeds; "
                  "[per_position.csv](per_position.csv): the thick lines' log-spaced bins; every position is in "
                  "each run's `runs/<tag>/result.json.gz`):", "", "![per_position](per_position.png)"]
    return lines + [""] + context_use.write_in_range(by_label, out, train_len)


def probe_lines(probes, settings, out, train_len):
    """The retrieval probe's section (retrieval_probe.write's files into out); "not measured" without rows."""
    head = ["## Retrieval probe", "",
            "Does a model use a span of its own validation text seen d tokens back? Each window holds a span twice, d "
            "tokens apart; its control the same window with the first copy replaced by another span. Gain = loss of "
            "the second copy in the control - in the probe window, nats per token (above 0: the model took something "
            "from d tokens back), and as a fraction of the control's loss; the same windows for every run "
            "(measure/retrieval_probe.py). Interval: Student's t over seeds (with one seed, over windows), the "
            "hierarchical bootstrap (seeds, then windows) beside it. Void: the in-range gain's interval does not "
            "exclude zero, so the model does not retrieve inside L and nothing past L can be read from it.", ""]
    if not probes:
        why = ("retrieval_probe = False" if not settings.get("retrieval_probe") else
               "no run has a probe of these keys, and the kept runs' checkpoints are not on this machine")
        return head + [f"Not measured ({why}; `--retrieval_probe=True` measures it, docs/extrapolation.md).", ""]
    retrieval_probe.write(probes, out, train_len)
    return head + [*retrieval_probe.table_lines(probes, train_len), "", "![retrieval probe](retrieval_probe.png)", "",
                   "Data: [retrieval_probe.csv](retrieval_probe.csv) (mean losses per run, seed and distance), "
                   "[retrieval_probe_windows.csv](retrieval_probe_windows.csv) (each window's loss).", ""]


def baseline_note(by_label, train_len):
    """The sentences under the results table on the n-gram rows and the † marker; [] without them."""
    if "4-gram" not in by_label:
        return []
    runs = [label for label, seeds in by_label.items() if seeds[0]["encoding"] != "ngram"]
    marked = (f"†: perplexity at the training length L = {train_len} worse than the 4-gram's "
              f"({len(worse_than_4gram(by_label, train_len))} of {len(runs)} rows): such a model has not learned "
              f"its training distribution yet, so its curve says nothing about extrapolation."
              if train_len in by_label["4-gram"][0]["ppl"] else
              f"No evaluation length is the training length {train_len}, so no row is compared with the 4-gram.")
    return [f"The n-gram rows are count models of the training split (interpolated absolute discounting, d = 0.75: "
            f"measure/ngram.py), scored on the same targets as the runs, each history cut at its window's start as "
            f"a run's context is. " + marked, ""]


def write(results, failed, settings, cfg, command, baselines=()):
    """Write the report folder settings["report_dir"]; -> the path of its report.md.
    failed: [(run, message)] of the runs that did not finish; baselines: measure/ngram.py's rows."""
    out = settings["report_dir"]
    os.makedirs(out, exist_ok=True)
    lengths = sorted({row["length"] for r in results for row in r["rows"]}) or settings["eval_lengths"]
    by_label = collect(results, baselines)
    write_csv(os.path.join(out, "runs.csv"), [
        dict(label=label, encoding=s["encoding"], seed=s["seed"], **{k: s["metrics"][k] for k in METRICS},
             **{f"ppl@{L}": s["ppl"].get(L, "") for L in lengths}) for label, seeds in by_label.items() for s in seeds])
    write_evals(out, [dict(row, seed=r["seed"]) for r in results for row in r["rows"]]
                + [dict(row, seed="") for row in baselines])
    prows = paired_rows(read_eval(out))   # from the files, as docs/results.md's generated blocks are
    write_csv(os.path.join(out, "paired.csv"), prows)
    pngs = {}
    if results:
        if any(read_log(r["dir"])["curve"] for r in results):
            pngs["val_loss"] = plot_val_loss(os.path.join(out, "val_loss.png"), results)
        pngs["ppl_vs_length"] = plot_ppl(os.path.join(out, "ppl_vs_length.png"), by_label, lengths, cfg.block_size)
    if settings["plots"]:
        first_seed = [r["dir"] for r in results if r["seed"] == settings["seed_list"][0]   # (a run kept from
                      and os.path.exists(checkpoint.path_in(r["dir"]))]                    # elsewhere: none)
        pngs.update(draw_all(os.path.join(out, "encodings"), length=max(settings["eval_lengths"]),
                             checkpoints=first_seed, factor=settings["rope_factor"]))
    n_seeds, tokens = len(settings["seed_list"]), cfg.batch_size * cfg.block_size
    md = ["# Positional encoding comparison", "",
          f"- commit: `{git_commit()}`; written {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC "
          f"on {platform.machine()} ({os.cpu_count()} CPUs), torch {torch.__version__}",
          f"- recipe: dataset `{cfg.dataset}`, {cfg.n_layer} layers x {cfg.n_head} heads x {cfg.n_embd} wide, "
          f"block_size {cfg.block_size}, {cfg.max_iters} iters x {tokens:,} tokens "
          f"= {cfg.max_iters * tokens:,} tokens per run, seeds {settings['seed_list']}",
          f"- evaluation: {settings['eval_mode']} windows, {settings['eval_tokens']:,} tokens per point or more, in "
          f"chunks of the longest length spread evenly over the val split, the same at every length; RoPE "
          f"extension methods use factor {settings['rope_factor']:g}",
          "", "## Results", "",
          "Loss is per token (nats); bits/byte is the val loss over the UTF-8 bytes of the text (comparable "
          "across tokenizers). " + (f"Values are mean ± std over {n_seeds} seeds. " if n_seeds > 1 else "") +
          f"ppl@L is the perplexity of windows of L tokens; '—' means the run cannot be evaluated there "
          f"(e.g. a position table shorter than L). tok/s is the median training throughput.", "",
          *results_table(by_label, lengths, cfg.block_size), "", *baseline_note(by_label, cfg.block_size)]
    if failed:
        md += ["**Failed runs** (rerun the command to retry):", ""]
        md += [f"- {run['encoding']} seed {run['seed']}: {msg}" for run, msg in failed] + [""]
    notes = {row["label"]: f" ({row['trained_params']:,} parameters trained)" for r in results for row in r["rows"]
             if row.get("trained_params")}   # LongLoRA's fine-tune trains adapters, embeddings and norms only
    notes.update({label: f" (positions dropped, recalibrated at {cfg.block_size})" for label in by_label
                  if "+drope ft" in label})   # DroPE's fine-tune runs at L (comparison/finetune.py)
    md += finetune_lines(by_label, notes, settings, cfg) if settings["finetune_len"] in lengths else []
    md += effective_scale_lines(settings, cfg, lengths, out)
    context = write_context(results, out, cfg.block_size)   # first: the published claims read context_gain.csv
    probes = {}
    for r in results:   # {label: {seed: rows}} of the runs whose probe was measured with this call's keys
        for label, rows in ((r.get("probe") or {}).get("rows") or {}).items():
            probes.setdefault(label, {})[r["seed"]] = rows
    md += paired_lines(prows) + probe_lines(probes, settings, out, cfg.block_size)
    md += published.section(read_eval(out), cfg.block_size, probes=probes or None,
                            context=published.read_context(out) if context else None)
    md += context
    caption = lambda name: (f"{CAPTIONS.get(name, name.replace('_', ' ') + '.')}\n\n"  # noqa: E731
                            f"![{name}]({os.path.relpath(pngs[name], out)})\n")
    runs_plots = ("val_loss", "ppl_vs_length")
    md += ["## Plots", ""] + [caption(name) for name in pngs if name in runs_plots]
    md += ["## What each encoding does", ""] + [caption(name) for name in pngs if name not in runs_plots]
    md += ["", "## Commands", "", "```", command, "```", "", "Each run:", "", "```", *(r["command"] for r in results),
           "```", "", "Files: [runs.csv](runs.csv) (one row per run), [eval.csv](eval.csv) (every evaluation point), "
           "[eval_chunks.csv](eval_chunks.csv) (each point's loss per evaluation chunk), [paired.csv](paired.csv).",
           ""]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md))
    return os.path.join(out, "report.md")
