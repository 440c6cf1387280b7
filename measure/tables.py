"""Cells, tables, CSV files and colours shared by every report (compare_report, context_use, tasks/report.py).
A leaf: it imports nothing from the project, so any report module can import it at the top."""
import csv
import math

import matplotlib


def mean_std(values):
    """(mean, sample standard deviation; None for one value) of the values that are not None or NaN."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None, None
    m = sum(vals) / len(vals)
    return m, (math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None)


def fmt(values, spec, scale=1, missing="—"):
    """A table cell: "mean ± std" of the values (times scale), the mean alone for one value, `missing` for none."""
    m, sd = mean_std(values)
    if m is None:
        return missing
    return f"{scale * m:{spec}}" + ("" if sd is None else f" ± {scale * sd:{spec}}")


def md_table(head, rows):
    """Markdown lines of a table: the header, then one line per row of cells."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


def write_csv(path, rows, empty=("label",)):
    """Dicts as CSV rows, the columns in order of first appearance (`empty`: the header when there are none)."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)) or list(empty))
        w.writeheader()
        w.writerows(rows)
    return path


def palette(encodings):
    """{encoding: colour}, distinct for up to 20 encodings."""
    names = list(dict.fromkeys(encodings))
    cmap = matplotlib.colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}
