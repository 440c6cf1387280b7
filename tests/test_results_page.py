"""docs/results.md cannot drift from the reports: every number on it outside the generated blocks
(which tests/test_docs.py checks) is listed here with the report file it comes from, and must equal
what that file gives; a number that is not listed fails the test."""
import csv
import os
import re

import compare
from tests.conftest import ROOT
from tools.docs import BLOCK, mastery_table, read

PAGE = "docs/results.md"
NAMES = ("Llama 4", "S²", "4-gram", "2-D", "T5")   # digits that are part of a name, not a number


def rows(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return list(csv.DictReader(f))


def claims():
    """{a number as the page writes it: the same text made from the report files}."""
    runs, family = rows("reports/compare/runs.csv"), rows("reports/compare-family/runs.csv")
    params = float(next(r["params"] for r in runs if r["label"] == "rope"))
    report = read("reports/compare/report.md")
    tokens = int(re.search(r"= ([\d,]+) tokens per run", report)[1].replace(",", ""))
    evaluated = re.search(r"- evaluation: \w+ windows, ([\d,]+) tokens per point", report)[1]
    family_runs = [r for r in family if r["encoding"] != "ngram"]
    cpus = re.search(r"\((\d+) CPUs\)", read("reports/compare-family/report.md"))[1]
    eval_tokens = int(re.search(r"^eval_tokens = (\d+)", read("configs/compare.py"), re.M)[1])
    def training(rel):   # "N runs' training took H h": a headline's runs as trained, their wall times summed
        trained = [r for r in rows(rel) if r["label"] == r["encoding"]]
        return "{} runs' training took {:.1f} h".format(len(trained), sum(float(r["wall_s"]) for r in trained) / 3600)
    suite = compare.plan(*compare.parse([os.path.join(ROOT, "configs", "tasks", "compare.py")])[:2])
    suite_rows = rows("reports/tasks-suite/runs.csv")
    return {
        "0.8M parameters": f"{params / 1e6:.1f}M parameters",
        "1.02M tokens": f"{tokens / 1e6:.2f}M tokens",
        "1.3 per parameter": f"{tokens / params:.1f} per parameter",
        "first 8,192": f"first {evaluated}",
        "59 min": f"{sum(float(r['wall_s']) for r in family_runs) / 60:.0f} min",
        "11 runs": f"{len(family_runs)} runs",
        "2-core": f"{cpus}-core",
        "95%": f"{mastery_table.__defaults__[0]:.0%}",
        "189 runs": f"{len(suite)} runs",   # the suite's size, from its config
        "189 of them kept": f"{len({(r['task'], r['encoding'], r['seed']) for r in suite_rows})} of them kept",
        "3 seeds": f"{len({r['seed'] for r in rows('reports/tasks/runs.csv')})} seeds",
        "65,536 targets": f"{eval_tokens:,} targets",
        "21 runs' training took 15.1 h": training("reports/compare-cpu/runs.csv"),
        "15 runs' training took 18.8 h": training("reports/compare-code/runs.csv"),
    }


def test_every_number_on_the_results_page_comes_from_a_report():
    text = BLOCK.sub("", read(PAGE))
    text = re.sub(r"\s+", " ", re.sub(r"`[^`]*`|\]\([^)]*\)|#\d+", "", text))   # commands, link targets, issues
    for name in NAMES:
        text = text.replace(name, "")
    for shown, want in claims().items():
        assert shown == want, f"{PAGE} says {shown!r}; the report files give {want!r}"
        assert shown in text, f"{shown!r} is no longer on {PAGE}: drop it from claims()"
        text = text.replace(shown, "")
    loose = re.findall(r".{0,30}\d.{0,30}", text)
    assert not loose, f"{PAGE}: numbers without a source (add them to claims() or generate them): {loose}"
