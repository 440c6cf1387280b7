"""The paired differences of an lm report (measure/stats.py): eval.csv and eval_chunks.csv written and read
back, which rows are compared (each encoding with RoPE, each method with its encoding), the per-seed paired
difference of loss with its interval, and the report's section of them (paired.csv's table)."""
import csv
import math
import os

import positional
from measure import stats
from measure.tables import md_table, write_csv


def write_evals(out, rows):
    """eval.csv (every evaluation point) and eval_chunks.csv (each point's mean loss per evaluation chunk,
    in evaluation.chunk_starts' order; per document in mode documents) into folder out."""
    write_csv(os.path.join(out, "eval.csv"), [{k: v for k, v in row.items() if k != "chunk_loss"} for row in rows])
    write_csv(os.path.join(out, "eval_chunks.csv"), [
        dict(label=row["label"], seed=row["seed"], length=row["length"],
             **{f"chunk{i}": f"{v:.6f}" for i, v in enumerate(row["chunk_loss"])})
        for row in rows if row.get("chunk_loss")])


def read_eval(report_dir):
    """eval.csv's rows (loss a float, length an int), each with chunk_loss from eval_chunks.csv ([] where a
    report predates it or the row has none)."""
    with open(os.path.join(report_dir, "eval.csv")) as f:
        rows = list(csv.DictReader(f))
    chunks, path = {}, os.path.join(report_dir, "eval_chunks.csv")
    if os.path.exists(path):
        with open(path) as f:
            for r in csv.DictReader(f):
                chunks[r["label"], r["seed"], r["length"]] = [float(v) for k, v in r.items() if k.startswith("chunk")]
    return [dict(r, loss=float(r.get("loss") or "nan"), length=int(r["length"]),
                 chunk_loss=chunks.get((r["label"], r["seed"], r["length"]), [])) for r in rows]


def comparisons(labels, reference="rope"):
    """[(label, reference)]: each encoding (a label of the registry, or one without "+") against the
    reference encoding, and each method of an encoding ("<enc>+<method>", with or without " ft")
    against the encoding as trained."""
    encodings = [label for label in labels if label in positional.REGISTRY or "+" not in label]
    out = [(label, reference) for label in encodings if label != reference and reference in labels]
    for label in labels:
        base = max((e for e in encodings if label.startswith(e + "+")), key=len, default=None)
        out += [(label, base)] if base and label not in encodings else []
    return out


ALPHA = 0.05   # the false discovery rate of a report's paired table (Benjamini-Hochberg across its cells)


def paired_rows(rows):
    """paired.csv's rows: per comparison and length, the paired difference of loss (label minus reference, nats per
    token) over the seeds both have. Primary: Student's t over the seeds' mean differences (stats.seed_level of
    stats.eval_differences; with one seed, over the chunks), its p-value adjusted across every cell of the table by
    Benjamini-Hochberg (q); a result when q < ALPHA. Secondary: the bootstrap over evaluation chunks with the seeds
    held fixed (chunk_lo, chunk_hi; empty where the runs have no common chunks)."""
    by = {}
    for r in rows:
        if r.get("encoding") != "ngram" and not math.isnan(r["loss"]):
            by.setdefault(r["label"], {}).setdefault(r["length"], {})[str(r["seed"])] = r
    out = []
    for label, ref in comparisons(list(by)):
        for length in sorted(by[label]):
            seeds = [s for s in by[label][length] if s in by[ref].get(length, {})]
            if not seeds:
                continue
            a, b = [by[label][length][s] for s in seeds], [by[ref][length][s] for s in seeds]
            p, level = stats.paired_evals(a, b), stats.seed_level(stats.eval_differences(a, b))
            out.append(dict(label=label, reference=ref, length=length, seeds=p.n, mean=p.mean, sd=p.sd, agree=p.agree,
                            lo=level.lo, hi=level.hi, p=level.p, interval=level.how, chunk_lo=p.lo, chunk_hi=p.hi))
    tested = [r for r in out if not math.isnan(r["p"])]
    for r, q in zip(tested, stats.benjamini_hochberg([r["p"] for r in tested]) if tested else []):
        r["q"] = q
    for r in out:
        r["q"] = r.get("q", math.nan)
        r["result"] = r["q"] < ALPHA
    return out


def paired_cell(p):
    """"-0.012 ± 0.004, 3/3, [-0.015, -0.009], q 0.003", in bold when a result, else followed by "not a result"."""
    sd = "" if math.isnan(p["sd"]) else f" ± {p['sd']:.3f}"
    ci = "no interval" if math.isnan(p["lo"]) else f"[{p['lo']:+.3f}, {p['hi']:+.3f}], q {p['q']:.2g}"
    text = f"{p['mean']:+.3f}{sd}, {p['agree']}/{p['seeds']}, {ci}"
    return f"**{text}**" if p["result"] else f"{text}, not a result"


def paired_table(prows):
    """Markdown: one row per comparison, one column per length, and how many differences are results."""
    lengths = sorted({p["length"] for p in prows})
    cells = {}
    for p in prows:
        cells.setdefault((p["label"], p["reference"]), {})[p["length"]] = paired_cell(p)
    return [*md_table(["row", "reference"] + [f"Δ loss @{L}" for L in lengths],
                      [[*pair, *(by_len.get(L, "—") for L in lengths)] for pair, by_len in cells.items()]), "",
            f"{sum(p['result'] for p in prows)} of {len(prows)} differences are results (t over seeds, BH across "
            f"cells: {', '.join(sorted({p['interval'] for p in prows}))}; false discovery rate {ALPHA:g})."]


def paired_lines(prows):
    """Markdown: the paired section of a report; [] without comparisons."""
    if not prows:
        return []
    return ["## Paired differences", "",
            "Loss of each row minus its reference's, in nats per token (negative: the row is better), paired by seed "
            "(the same seed trains both on the same batches, and both are scored on the same targets): mean ± sd "
            "over seeds, the seeds whose difference has the mean's sign, and the 95% interval of the mean difference: "
            "Student's t over the seeds' mean differences (mean ± t sd / √n; with one seed, over the evaluation "
            "chunks, the seeds' spread left out), with its p-value adjusted across every cell of this table by "
            "Benjamini-Hochberg (q; measure/stats.py). A difference is a result when q < "
            f"{ALPHA:g} (a false discovery rate of {ALPHA:g} over the table): those are in bold; every other cell "
            "says that it is not a result. paired.csv also holds the bootstrap over evaluation chunks with the seeds "
            "held fixed (chunk_lo, chunk_hi), which leaves the seeds' spread out.", "",
            *paired_table(prows), "", "Data: [paired.csv](paired.csv).", ""]
