"""Tables and pictures of task scores: checkpoints' (evaluate.py on a task checkpoint) or a
whole tasks x encodings x seeds comparison's (compare.py, suite "tasks").

Seeds are summarised as mean ± sample standard deviation. A run is *learned* when its exact
match at the training length, on held-out examples, reaches MASTERY; the others are reported as
"not learned" (their rate per task and encoding) and left out of the generalisation ranking: a
model that did not learn its training distribution says nothing about lengths past it. The
ranking follows Kazemnejad et al. 2023 (https://arxiv.org/abs/2305.19466, figure 3): in each
task the encodings are ranked by exact-match accuracy averaged over the lengths past the
training length (the mean over the learned seeds; tied encodings share the mean of their
ranks' reciprocals), and an encoding's MRR is the mean of 1/rank over the tasks that every ranked encoding
learned (the same tasks for all, so that no encoding's MRR rests on an easier subset of them; ranked: an encoding
with a score past the training length on some task).

A run scored within NEAR of the bar at the training length is scored there again on NEAR_SAMPLES examples
(comparison/task_suite.py), and that score decides it. Runs trained with --stop_at_mastery (training/mastery.py)
also give the iterations they took to reach the bar, or "not learned by" their cap, reported before any score
past the training length.

Retrieval by distance (the retrieval tasks scored with distance=True, tasks/score.py by_distance): per task and
encoding, exact match in each bin of key-query distance (every scored length pooled), the mean over the learned
seeds with Student's t interval over them (measure.stats.t_interval), and the answers scored per run.
"""
import json
import math
import os

from measure.compare_report import plot_by_length
from measure.encoding_plots import figure, save
from measure.stats import reciprocal_ranks, t_interval
from measure.tables import fmt, md_table, mean_std, palette, write_csv
from tasks.registry import get
from tasks.score import effective_window

import matplotlib.pyplot as plt  # noqa: E402  (after encoding_plots, which picks the Agg backend)

MASTERY = 0.95   # exact match at the training length that a run needs to count as learned
# Near the bar a score of SAMPLES = 200 examples is too noisy to decide (its sd at 95% is 1.5 points): a run whose
# exact match at L is less than NEAR from MASTERY (90% < exact < 100% for 95%; 100% of 200 puts the rate above 98%
# at 95% confidence, far from the bar) is scored again at L on NEAR_SAMPLES examples (sd 1.0 point at 95%).
NEAR = 0.05
NEAR_SAMPLES = 500


def near_bar(exact, bar=None):
    """Whether an exact match at the training length is too close to the bar (MASTERY) to decide on few samples."""
    return exact is not None and abs(round(exact - (MASTERY if bar is None else bar), 9)) < NEAR   # 0.9: not near


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
    fig, axes = plt.subplots(1, n, figsize=(2.2 + 2.6 * n, 1.3 + 0.35 * max(len(p) for p in panels.values())),
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


def learned(rows, train_len):
    """Whether a run (its rows {length, exact, ...}) reaches MASTERY exact match at the training length."""
    exact = next((r["exact"] for r in rows if r["length"] == train_len), None)
    return exact is not None and exact >= MASTERY


def mrr(by_task):
    """{task: {encoding: score, None: none there}} -> (the common tasks, {encoding: MRR or None}, best first). The
    ranked encodings are those with a score on some task (not one with a position table, which has none past it,
    nor one that learned no task); the common tasks, those where every ranked encoding has a score. Per common
    task, the reciprocal ranks of the ranked encodings (ties averaged: measure.stats), their mean over the common
    tasks; None for an encoding not ranked, and for all when no task is common."""
    ranked = list(dict.fromkeys(e for scores in by_task.values() for e, v in scores.items() if v is not None))
    common = [t for t, scores in by_task.items() if ranked and all(scores.get(e) is not None for e in ranked)]
    recip = {e: [] for scores in by_task.values() for e in scores}
    for t in common:
        for e, r in reciprocal_ranks({e: by_task[t][e] for e in ranked}).items():
            recip[e].append(r)
    out = {e: sum(v) / len(v) if v else None for e, v in recip.items()}
    return common, dict(sorted(out.items(), key=lambda kv: (kv[1] is None, -(kv[1] or 0))))


def past_training(rows, train_len, key="exact"):
    """Mean accuracy over the lengths past the training length (None if there are none, or n/a)."""
    vals = [r[key] for r in rows if r["length"] > train_len]
    return sum(vals) / len(vals) if vals and None not in vals else None


def runs_cell(runs, ok):
    """Runs not learned of all runs, e.g. "1/3"."""
    return f"{len(runs) - len(ok)}/{len(runs)}"


def ranking(results, task_names, encs, train_len):
    """Markdown: the runs not learned per task and encoding, then the MRR ranking of the learned runs."""
    by = {(t, e): [r for r in results if r["task"] == t and r["encoding"] == e] for t in task_names for e in encs}
    ok = {k: [r for r in runs if learned(r["rows"], train_len)] for k, runs in by.items()}
    every = [r for r in results if learned(r["rows"], train_len)]
    md = ["## Learned at the training length", "",
          f"A run is learned when its exact match at L = {train_len} (held-out examples) reaches {MASTERY:.0%}; "
          f"runs not learned / runs, per task and encoding ({runs_cell(results, every)} of all runs not learned):", ""]
    md += md_table(["encoding", *task_names, "all tasks"], [
        [e] + [runs_cell(by[t, e], ok[t, e]) for t in task_names]
        + [runs_cell(sum((by[t, e] for t in task_names), []), sum((ok[t, e] for t in task_names), []))]
        for e in encs])
    again = [r for r in results if any(x["length"] == train_len and x.get("samples", 0) >= NEAR_SAMPLES
                                       for x in r["rows"])]
    if again:
        md += ["", f"{len(again)} run(s) scored within {100 * NEAR:.0f} points of the bar at L were scored there "
                   f"again on {NEAR_SAMPLES} examples, which decide them (their rows in runs.csv give the samples)."]
    ood = {t: {e: mean_std([past_training(r["rows"], train_len) for r in ok[t, e]])[0] for e in encs}
           for t in task_names}

    def cell(t, e):
        if not ok[t, e]:
            return "not learned"
        if ood[t][e] is None:
            return "n/a"
        some = len(ok[t, e]) < len(by[t, e])
        return f"{100 * ood[t][e]:.1f}" + (f" ({len(ok[t, e])}/{len(by[t, e])} seeds)" if some else "")
    common, ranks = mrr(ood)
    md += ["", "## Ranking (MRR over tasks, Kazemnejad et al. 2023)", "",
           "Exact match averaged over the lengths past the training length, mean over the learned seeds (%); per "
           "task the encodings are ranked (tied ones share the mean of their ranks' reciprocals), and the MRR is "
           "the mean of 1/rank over the tasks that every ranked encoding learned, the same tasks for all (ranked: "
           "an encoding with a score past L on some task; MRR — for the others): "
           + (", ".join(common) + f" ({len(common)} of {len(task_names)})." if common else
              "none here, so no MRR (a task that one encoding did not learn would rank the others on other tasks)."),
           ""]
    md += md_table(["encoding", "MRR", *task_names], [
        [e, "—" if v is None else f"{v:.2f}"] + [cell(t, e) for t in task_names] for e, v in ranks.items()])
    return md


def bin_label(lo, hi):
    """"[L/4, L/2)" for the bin [0.25 L, 0.5 L) of distances."""
    def unit(b):
        return "0" if b == 0 else "L" if b == 1 else f"{b:g}L" if b > 1 else f"L/{1 / b:g}"
    return f"[{unit(lo)}, {unit(hi)})"


def pooled(rows):
    """{(lo, hi): (right, answers)} of by_distance's rows, summed over their lengths, bins in order."""
    out = {}
    for r in rows:
        right, answers = out.get((r["lo"], r["hi"]), (0, 0))
        out[r["lo"], r["hi"]] = (right + r["right"], answers + r["answers"])
    return out


def exact_cell(values):
    """Exact match (%) over seeds: "mean [t interval]", the mean alone with one seed, "—" with none."""
    if not values:
        return "—"
    mean, lo, hi = t_interval([100 * v for v in values])
    return f"{mean:.1f}" + ("" if math.isnan(lo) else f" [{lo:.1f}, {hi:.1f}]")


def answers_cell(counts):
    """Answers scored per run in a bin: one number, or the range where the runs differ."""
    return "—" if not counts else str(min(counts)) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def distance_tables(pools, bins, counts_apart=True):
    """Markdown of one task: pools {label: [per seed: pooled()]}, one row per label and one column per bin; exact
    match with its interval, then the answers per run (counts_apart), else each cell's answers per run in it."""
    head = ["", *(bin_label(*b) for b in bins)]

    def cells(seeds, b):
        counts = [p.get(b, (0, 0))[1] for p in seeds if p.get(b, (0, 0))[1]]
        exact = exact_cell([p[b][0] / p[b][1] for p in seeds if p.get(b, (0, 0))[1]])
        both = exact if counts_apart or not counts else f"{exact} · {answers_cell(counts)}"
        return exact, both, answers_cell(counts)
    grid = {label: [cells(seeds, b) for b in bins] for label, seeds in pools.items()}
    if not counts_apart:
        return ["Exact match (%), mean [95% t interval] over the learned seeds · answers scored per run:", "",
                *md_table(head, [[label] + [c[1] for c in row] for label, row in grid.items()])]
    return ["Exact match (%), mean [95% t interval] over the learned seeds:", "",
            *md_table(head, [[label] + [c[0] for c in row] for label, row in grid.items()]), "",
            "Answers scored per run (each run scores the same examples; fewer past a position table):", "",
            *md_table(head, [[label] + [c[2] for c in row] for label, row in grid.items()])]


def retrieval_by_distance(results, out, task_names, encs, train_len, asked=False):
    """The report's "Retrieval by distance" section and distance.csv / distance.png from the runs scored by
    distance (asked: the call's task_distance, which also reports runs not scored); [] when none was and none was
    asked. Runs not learned at L are left out."""
    rows = [dict(task=r["task"], encoding=r["encoding"], seed=r["seed"], learned=learned(r["rows"], train_len), **x)
            for r in results for x in (r.get("distance") or {}).get("rows", [])]
    if not rows and not asked:
        return []
    write_csv(os.path.join(out, "distance.csv"), rows, empty=("task",))
    md = ["", "## Retrieval by distance", "",
          f"Does an encoding use the context past L = {train_len}? Exact match of each answer by the distance from "
          f"the value it copies to the token that predicts it (tasks/score.py `by_distance`; a model reading only "
          f"its last w tokens reaches distances < w), on examples whose distances are drawn to cover the bins evenly, "
          f"every scored length pooled (per length: distance.csv). Only runs learned at L (exact match >= "
          f"{MASTERY:.0%}) are shown; 'not learned': none was, 'not measured': no run was scored by distance.", ""]
    panels, labels = {}, []
    for t in [t for t in task_names if any(x["task"] == t for x in rows)
              or asked and hasattr(get(t), "copy_distances")]:
        bins = list(dict.fromkeys((x["lo"], x["hi"]) for x in rows if x["task"] == t))
        pools, chosen, note = {}, {}, []
        for e in encs:
            every = [r for r in results if r["task"] == t and r["encoding"] == e]
            scored = [r for r in every if r.get("distance")]
            ok = [r for r in scored if learned(r["rows"], train_len)]
            if ok:
                chosen[f"{e} ({len(ok)}/{len(every)} seeds)"] = ok
                pools[f"{e} ({len(ok)}/{len(every)} seeds)"] = [pooled(r["distance"]["rows"]) for r in ok]
            elif scored:
                note.append(f"{e}: not learned")
            if len(scored) < len(every):
                note.append(f"{e}: {'' if not scored else f'{len(every) - len(scored)} run(s) '}not measured")
        shown = distance_tables(pools, bins) if pools else []
        lengths = sorted({x["length"] for x in rows if x["task"] == t})
        by_length = {f"{label.split(' (')[0]} at {n}": [pooled([x for x in r["distance"]["rows"] if x["length"] == n])
                                                         for r in runs]
                     for label, runs in chosen.items() for n in lengths}
        shown += ["", "By scored length (the key near the query in a long sequence: bins below L at long lengths):",
                  "", *distance_tables(by_length, bins, counts_apart=False)] if pools else []
        md += [f"### {t}", "", *shown] + ([""] if shown and note else []) + (
            ["Left out: " + "; ".join(note) + "."] if note else []) + [""]
        panels[t] = {label: [mean_std([p[b][0] / p[b][1] for p in seeds if p.get(b, (0, 0))[1]])[0] for b in bins]
                     for label, seeds in pools.items()}
        labels = [bin_label(*b) for b in bins] if pools else labels   # the same bins in every task
    if any(panels.values()):
        plot_heatmap(os.path.join(out, "distance.png"), {t: p for t, p in panels.items() if p}, labels,
                     "exact match by key-query distance (learned runs)")
        md += ["![distance](distance.png)", ""]
    return md + ["Data: [distance.csv](distance.csv)."]


def to_mastery(results, task_names, encs):
    """Markdown: the iterations each task and encoding took to reach the bar (runs trained with --stop_at_mastery:
    their "mastery" record, comparison/task_suite.py), mean ± sd over the seeds that reached it, and the seeds
    that did not by the cap; [] when no run has a record."""
    records = {(t, e): [r["mastery"] for r in results if r["task"] == t and r["encoding"] == e and r.get("mastery")]
               for t in task_names for e in encs}
    if not any(records.values()):
        return []

    def cell(got):
        its = [m["reached"] for m in got if m["reached"] is not None]
        missed = len(got) - len(its)
        caps = "/".join(str(c) for c in sorted({m["cap"] for m in got if m["reached"] is None}))
        parts = [fmt(its, ".0f", missing="")]
        if missed:
            parts.append(f"not learned by {caps} ({missed}/{len(got)} seeds)")
        return "; ".join(p for p in parts if p) or "—"
    bars = sorted({(m["bar"], m["samples"]) for got in records.values() for m in got})
    md = ["## Iterations to mastery", "",
          "Each run trained until its exact match at L on held-out examples (seeds apart from the training and the "
          "scoring ones) reached the bar, checked at every evaluation, or until its cap (the task's max_iters): "
          + ", ".join(f"bar {b:.0%} on {n} examples" for b, n in bars)
          + ". Iterations of the first evaluation at or past the bar, mean ± sd over the seeds that reached it; "
          "\"not learned by N\": the seeds that had not at the cap N. Scores past L follow below.", ""]
    return md + md_table(["encoding", *task_names], [[e] + [cell(records[t, e]) for t in task_names] for e in encs]) + [
        ""]


def plot_windows(path, cells, steps, lengths, train_len, finetune_len):
    """cells: {label: [per step: the seeds' effective windows]}: mean ± sd against fine-tuning steps."""
    with figure(path, (7.5, 4), xlabel="fine-tuning steps", ylabel="effective context window (tokens)",
                title="passkey effective context window against fine-tuning steps") as ax:
        for i, (label, per_step) in enumerate(cells.items()):
            m = [mean_std(v) for v in per_step]
            x = [j + 0.08 * (i - (len(cells) - 1) / 2) for j in range(len(steps))]   # side by side, not on top
            y = [math.nan if a is None else a for a, _ in m]   # nan: no learned seed at that step
            ax.errorbar(x, y, yerr=[sd or 0 for _, sd in m], marker="o", ms=4, capsize=3, label=label)
        for n, what in ((train_len, "pretraining length L"), (finetune_len, "fine-tuning length")):
            ax.axhline(n, color="grey", linestyle=":", lw=1)
            ax.text(-0.3, n, what, fontsize=7, va="bottom", ha="left", color="grey")
        ax.set_xticks(range(len(steps)), [str(k) for k in steps])
        ax.set_yticks([0, *lengths], ["0 (none)", *(str(n) for n in lengths)])   # 0: not even L passes PI's rule
    return path


def windows(results, out, train_len, finetune_len, lengths):
    """PI's Table 4 in miniature from the runs' fine-tunes (compare.py, finetune_steps): finetune_windows.csv
    and .png, and the markdown; [] when no run was fine-tuned. Runs not learned are left out."""
    rows = [dict(task=r["task"], encoding=r["encoding"], seed=r["seed"], learned=learned(r["rows"], train_len), **w)
            for r in results for w in r.get("windows", [])]
    if not rows:
        return []
    write_csv(os.path.join(out, "finetune_windows.csv"), rows)
    labels = list(dict.fromkeys(f"{w['encoding']}+{w['method']}" for w in rows))
    steps = sorted({w["steps"] for w in rows})
    cells = {label: [[w["effective_window"] for w in rows if w["learned"] and f"{w['encoding']}+{w['method']}" == label
                      and w["steps"] == k] for k in steps] for label in labels}
    plot_windows(os.path.join(out, "finetune_windows.png"), cells, steps, lengths, train_len, finetune_len)
    seeds = {(w["encoding"], w["seed"]): w["learned"] for w in rows}
    md = ["", "## Effective context window against fine-tuning steps (PI's Table 4 in miniature)", "",
          f"Pretrained at L = {train_len}, fine-tuned at {finetune_len} tokens per sequence with each method (direct: "
          f"no scaling, PI's FT), the fine-tune scored after each number of steps (0: the pretrained model with the "
          f"method's scaling); PI's effective window (the largest scored length with >= 20% passkey retrieval at "
          f"every length up to it and every depth; scored lengths {lengths}), tokens, mean ± sd over the "
          f"{sum(seeds.values())} of {len(seeds)} seeds whose pretraining was learned. In Chen et al. 2023 (section "
          f"3.2, Table 4) LLaMA extended with PI reaches its target window within 200 steps; direct fine-tuning "
          f"takes it from 2048 to 2560 in more than 10000 steps.", ""]
    md += md_table(["method", *[str(k) for k in steps]], [[label] + [fmt(v, ".0f") for v in per_step]
                                                          for label, per_step in cells.items()])
    return md + ["", "![windows](finetune_windows.png)", "Data: [finetune_windows.csv](finetune_windows.csv)."]


def write_comparison(results, failed, settings, train_len, wall_s, command):
    """report.md, runs.csv, <task>.png and heatmap.png of compare.py's task suite in settings['report_dir']
    (and PI's Table 4 with finetune_steps); failed: [(run, message)]. Returns the report's path."""
    out, lengths = settings["report_dir"], settings["lengths"]
    os.makedirs(out, exist_ok=True)
    task_names = list(dict.fromkeys(r["task"] for r in results))
    encs = list(dict.fromkeys(r["encoding"] for r in results))
    by = {(t, e): [r for r in results if r["task"] == t and r["encoding"] == e] for t in task_names for e in encs}
    runs = []
    for r in results:
        for x in r["rows"]:
            runs.append(dict(task=r["task"], encoding=r["encoding"], seed=r["seed"], **x,
                             learned=learned(r["rows"], train_len), train_s=round(r["train_s"], 1),
                             **({"mastered_at": r["mastery"]["reached"]} if r.get("mastery") else {})))
    write_csv(os.path.join(out, "runs.csv"), runs, empty=("task",))
    md = ["# Tasks: length generalisation by encoding", "", f"`{command}`", "",
          f"{len(results)} runs ({', '.join(task_names)} x {', '.join(encs)} x seeds {settings['seed_list']}), "
          f"trained at lengths <= {train_len}, scored at {lengths} with {settings['samples']} samples per point; "
          f"{settings['jobs']} run(s) side by side, {settings['threads']} thread(s) each, {os.cpu_count()} cores. "
          f"Wall time of this call {wall_s / 60:.1f} min (runs' own: training "
          f"{sum(r['train_s'] for r in results) / 60:.1f} min, scoring "
          f"{sum(r.get('score_s', 0) for r in results) / 60:.1f} min, summed over runs; runs reused from an "
          f"earlier call count their first time).", ""]
    recipes = {t: r for t, r in settings.get("task_recipes", {}).items() if t in task_names}
    if recipes:
        md += ["Tasks trained on their own recipe (the rest on the config's): " + "; ".join(
            f"{t}: " + ", ".join(f"{k}={v}" for k, v in r.items()) for t, r in recipes.items()) + ".", ""]
    if failed:
        md += ["Failed runs: " + "; ".join(f"{run['tag']}: {msg}" for run, msg in failed), ""]
    md += to_mastery(results, task_names, encs)
    md += ranking(results, task_names, encs, train_len)
    md += retrieval_by_distance(results, out, task_names, encs, train_len, settings.get("task_distance", False))
    md += windows(results, out, train_len, settings.get("finetune_len", 0), lengths)
    panels = {}
    for t in task_names:
        series = {e: [r["rows"] for r in by[t, e]] for e in encs if by[t, e]}
        panels[t] = {e: [mean_std(at(seeds, n))[0] for n in lengths] for e, seeds in series.items()}
        plot_accuracy(os.path.join(out, f"{t}.png"), series, lengths, train_len, f"{t}: accuracy against length")
        md += ["", f"## {t}", "", *tables(series, lengths, "Exact match (%, mean ± std over seeds, every run):"),
               f"![{t}]({t}.png)"]
        eff = {e: [r["effective_window"] for r in by[t, e] if "effective_window" in r] for e in encs}
        if any(eff.values()):
            md += ["", "Passkey effective context window (PI's 20% rule over every depth; tokens): " + ", ".join(
                f"{e} {fmt(w, '.1f', missing='n/a')}" for e, w in eff.items() if w)]
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
    path = os.path.join(report_dir, "task_scores")
    lengths = [r["length"] for r in next(iter(out["runs"].values()))["rows"]]
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
            suffix = "" if len(out["runs"]) == 1 else "_" + os.path.basename(d)
            gpath = os.path.join(report_dir, f"passkey_grid{suffix}")
            write_csv(gpath + ".csv", run["grid"])
            md += ["", f"{d}: passkey effective context window {run['effective_window']} tokens "
                   f"(PI's rule: the largest length with >= 20% retrieval at every length up to it, every depth)"]
            depths = sorted({r["depth"] for r in run["grid"]})
            panel = {f"depth {dp:g}": [next(r["exact"] for r in run["grid"] if r["length"] == n and r["depth"] == dp)
                                       for n in lengths] for dp in depths}
            plot_heatmap(gpath + ".png", {d: panel}, lengths, "passkey retrieval, length x depth")
            md += [f"![grid]({os.path.basename(gpath)}.png)"]
    scored = {f"{d} ({run['encoding']})": [pooled(run["distance"])]
              for d, run in out["runs"].items() if "distance" in run}
    if scored:
        dist = [dict(out_dir=d, encoding=run["encoding"], **r) for d, run in out["runs"].items()
                for r in run.get("distance", [])]
        write_csv(os.path.join(report_dir, "task_distance.csv"), dist)
        md += ["", f"## Retrieval by distance (training length L = {out['train_len']}, every length pooled; per "
               f"length: task_distance.csv)", "", *distance_tables(scored, list(dict.fromkeys(
                   (r["lo"], r["hi"]) for r in dist)))]
    with open(path + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    return path + ".md"
