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


def paired_rows(rows):
    """paired.csv's rows: per comparison and length, the per-seed paired difference of loss (label minus
    reference, nats per token) over the seeds both have (stats.paired), with the bootstrap interval over
    evaluation chunks where every run has the same chunks, else Student's t interval over seeds."""
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
            p = stats.paired_evals(a, b)
            chunked = not math.isnan(p.lo)
            lo, hi = p.interval()
            out.append(dict(label=label, reference=ref, length=length, seeds=p.n, mean=p.mean, sd=p.sd, agree=p.agree,
                            lo=lo, hi=hi, interval=f"{len(a[0]['chunk_loss'])} chunks" if chunked else "seeds",
                            result=p.is_result))
    return out


def paired_cell(p):
    """"-0.012 ± 0.004, 3/3, [-0.015, -0.009]", in bold when a result, else followed by "not a result"."""
    sd = "" if math.isnan(p["sd"]) else f" ± {p['sd']:.3f}"
    ci = "no interval" if math.isnan(p["lo"]) else f"[{p['lo']:+.3f}, {p['hi']:+.3f}]"
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
            f"{sum(p['result'] for p in prows)} of {len(prows)} differences are results (interval over "
            f"{', '.join(sorted({p['interval'] for p in prows}))})."]


def paired_lines(prows):
    """Markdown: the paired section of a report; [] without comparisons."""
    if not prows:
        return []
    return ["## Paired differences", "",
            "Loss of each row minus its reference's, in nats per token (negative: the row is better), paired by seed "
            "(the same seed trains both on the same batches, and both are scored on the same targets): mean ± sd "
            "over seeds, the seeds whose difference has the mean's sign, and a 95% interval of the mean difference "
            "(measure/stats.py): a bootstrap over the evaluation chunks, resampled together for every seed, or, where "
            "runs have no per-chunk losses, Student's t interval over seeds (mean ± t sd / √n). A difference is a "
            "result only when its interval excludes zero and every seed's difference has the mean's sign (the "
            "bootstrap holds the seeds fixed): those are in bold; every other cell says that it is not a result.", "",
            *paired_table(prows), "", "Data: [paired.csv](paired.csv).", ""]
