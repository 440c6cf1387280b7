"""The docs against the code and the data.

- Every ```-fenced `python ...` command of README.md runs as written, at tiny size (size keys
  appended, output folders moved to a temp dir), in README order, and exits 0.
- Every `--key` of a command in README.md and docs/ is listed by that command's --help.
- Every relative link (and #anchor) in README.md and docs/ resolves.
- Every generated block (`<!-- generated from SOURCE... -->` ... `<!-- end -->`) equals what
  its generator makes of SOURCE now: no number on a docs page drifts from its CSV or JSON.
- docs/encodings.md's "Adding an encoding" code is the one tests/test_settings.py trains.

After a new report or benchmark, regenerate the blocks: python -m tests.test_docs
"""
import ast
import csv
import glob
import json
import os
import re
import shlex
import statistics
import sys

import pytest

import positional
from model import GPT, GPTConfig

from tests.conftest import ROOT, TINY_TEXT, run_py

PAGES = ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]
BLOCK = re.compile(r"<!-- generated from (?P<src>[^>]+?) -->\n(?P<body>.*?)<!-- end -->", re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def commands(rel):
    """The `python ...` lines of a page's ``` blocks, continuation lines joined, comments dropped."""
    out = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", read(rel), re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            if line.startswith("python "):
                out.append(shlex.join(shlex.split(line, comments=True)))
    return out


# ---------------------------------------------------------------- generated blocks

def mean_std(values):
    """Mean ± sample std over seeds; one seed: its value alone."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def ppl_table(runs_csv):
    """Per encoding as trained (label == encoding) and n-gram baseline: ppl at each length, mean ± std over seeds."""
    rows = list(csv.DictReader(open(runs_csv)))
    lengths = [c for c in rows[0] if c.startswith("ppl@")]
    lines = ["| encoding | seeds | " + " | ".join(lengths) + " |", "|---" * (len(lengths) + 2) + "|"]
    for enc in dict.fromkeys(r["label"] for r in rows if r["label"] == r["encoding"] or r["encoding"] == "ngram"):
        runs = [r for r in rows if r["label"] == enc]
        cells = [mean_std([float(r[c]) for r in runs]) if all(r[c] not in ("", "nan") for r in runs) else "—"
                 for c in lengths]
        lines.append(f"| {enc} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def mastery_table(task_runs_csv, threshold=0.95):
    """Per task and encoding: runs reaching `threshold` exact match at the training length."""
    rows = list(csv.DictReader(open(task_runs_csv)))
    lines = [f"| task | encoding | runs with exact match ≥ {threshold:.0%} at L |", "|---|---|---|"]
    for task in dict.fromkeys(r["task"] for r in rows):
        for enc in dict.fromkeys(r["encoding"] for r in rows if r["task"] == task):
            mine = [r for r in rows if r["task"] == task and r["encoding"] == enc]
            at_l = [r for r in mine if int(r["length"]) == min(int(x["length"]) for x in mine)]
            lines.append(f"| {task} | {enc} | {sum(float(r['exact']) >= threshold for r in at_l)} of {len(at_l)} |")
    return "\n".join(lines) + "\n"


def recipe_trials_table(trials_csv):
    """reports/tasks-recipes/trials.csv: one recipe trial a row, its exact match at L and whether it learned."""
    rows = list(csv.DictReader(open(trials_csv)))
    lines = ["| task | encoding | seed | iterations | learning rate | other keys | exact match at L "
             "| learned (≥ 95%) | train s |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| `{r['task']}` | {r['encoding']} | {r['seed']} | {int(r['max_iters'])} | "
              f"{float(r['learning_rate']):g} | {r.get('other') or '—'} | {float(r['exact_at_L']):.1%} | "
              f"{'yes' if float(r['exact_at_L']) >= 0.95 else 'no'} | {r['train_s']} |" for r in rows]
    return "\n".join(lines) + "\n"


def train_step_table(*bench_jsons):
    """bench.py --sections=train JSONs: ms per step and the ratio to `none`, one column pair each."""
    runs = [json.load(open(p)) for p in bench_jsons]
    head = [f"block {r['args']['block_size']}, batch {r['args']['batch_size']}" for r in runs]
    lines = ["| encoding | " + " | ".join(f"ms/step ({h}) | vs none" for h in head) + " |",
             "|---" * (2 * len(runs) + 1) + "|"]
    for enc in runs[0]["train"]:
        cells = [f"{r['train'][enc]['ms']:.1f} | {r['train'][enc]['ratio_to_none']:.2f}" for r in runs]
        lines.append(f"| {enc} | " + " | ".join(cells) + " |")
    a, m = runs[0]["args"], runs[0]["machine"]
    lines.append(f"\ntorch {m['torch']}, {m['cpus']} CPUs, {a['threads']} thread(s), {a['n_layer']} layers x "
                 f"{a['n_head']} heads x {a['n_embd']}, median of {a['rounds']} rounds x {a['steps']} step(s).")
    return "\n".join(lines) + "\n"


def long_table(folder):
    """A folder of bench.py --sections=long JSONs (one encoding each, any lengths): seconds and process peak
    against rope's at the same length (time: against the RoPE run just before it, rope_s, where the JSON has one),
    and whether issue #22's bounds hold (memory within 2x, time within 3x)."""
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(folder, "*.json")))]
    rows = sorted(((int(T), e, r, c) for r in runs for e, by_T in r["long"].items() for T, c in by_T.items()),
                  key=lambda x: x[:2])
    ref = {T: c for T, e, _, c in rows if e == "rope"}
    machines = sorted({r["machine"].get("name", "unnamed machine") for r in runs})   # > 1: a column names each row's
    lines = ["| encoding | kernel | tokens | seconds | vs rope | process peak MiB | vs rope | within 2x / 3x |"
             + " machine |" * (len(machines) > 1), "|---" * (8 + (len(machines) > 1)) + "|"]
    for T, e, r, c in rows:
        cls = positional.REGISTRY[e]   # model.choose_kernel's choice for one long causal forward without gradients
        path = ("relative" if cls.relative_bias else "banded" if cls.overrides("far") else
                "own, by blocks" if cls.overrides("attend") else "chunks")
        kernel = (r["args"]["long_kernel"] or path) if cls.needs_score_matrix else "sdpa causal"
        t, m = c["s"] / c.get("rope_s", ref[T]["s"]), c["peak_bytes"] / ref[T]["peak_bytes"]   # rope_s: just before
        lines.append(f"| {e} | {kernel} | {T:,} | {c['s']:.1f} | {t:.2f} | {c['peak_bytes'] / 2 ** 20:.0f} | {m:.2f} | "
                     f"{'yes' if m <= 2 else 'no'} / {'yes' if t <= 3 else 'no'} |"
                     + f" {r['machine'].get('name', 'unnamed').split(',')[0].replace('(R)', '').replace(' Processor', '')} |" * (len(machines) > 1))
    m = runs[0]["machine"]
    lines.append(f"\n{' and '.join(machines)}, torch {m['torch']}, {m['threads']} thread(s), one process per "
                 f"encoding, 4 layers x 4 heads x 128, one sequence"
                 + (" (time against a RoPE run on the same machine just before)." if len(machines) > 1 else "."))
    short = sorted(e for r in runs for e, by_T in r["long"].items() if not by_T)
    if short:
        lines.append(f"No row for {', '.join(short)}: fewer positions than this (max_positions; learned is not run).")
    return "\n".join(lines) + "\n"


def train_memory_table(*bench_jsons):
    """bench.py --sections=train_memory JSONs: one training step's process peak per encoding, against rope's."""
    runs = [json.load(open(p)) for p in bench_jsons]
    head = [f"block {r['args']['block_size']}, batch {r['args']['batch_size']}" for r in runs]
    lines = ["| encoding | " + " | ".join(f"peak MiB ({h}) | vs rope" for h in head) + " |", "|---" * (2 * len(runs) + 1) + "|"]
    for enc in runs[0]["train_memory"]:
        cells = [f"{r['train_memory'][enc]['peak_bytes'] / 2 ** 20:.0f} | "
                 f"{r['train_memory'][enc]['peak_bytes'] / r['train_memory']['rope']['peak_bytes']:.2f}" for r in runs]
        lines.append(f"| {enc} | " + " | ".join(cells) + " |")
    m = runs[0]["machine"]
    lines.append(f"\n{m.get('name', 'unnamed machine')}, torch {m['torch']}, {m['threads']} thread(s), 4 layers x 4 heads "
                 f"x 128; the process peak includes torch itself (about 400 MiB).")
    return "\n".join(lines) + "\n"


def gpu_table(folder):
    """benchmarks/gpu.sh's figures on a GPU (run1/, run2/ in order: a later row of an encoding and window replaces an
    earlier one): benchmarks/gpu_check.py's rows, and bench.py's training step peak at block 1024 per encoding."""
    checks, memory, names = {}, {}, set()
    for run in sorted(glob.glob(os.path.join(folder, "run*"))):
        for path in sorted(glob.glob(os.path.join(run, "*.json"))):
            r = json.load(open(path))
            for row in r.get("rows", []):
                checks[row["encoding"], row["window"]] = row
            memory.update(r.get("train_memory", {}))
            names.add(f"{r['machine']['name']}, torch {r['machine']['torch']}" if "machine" in r
                      else f"{r['device']}, torch {r['torch']}")
    lines = ["| encoding | window | kernels (evaluation; training) | logits, rel. | gradients, rel. | static decode = "
             "forward | training step peak MiB | vs rope |", "|---" * 8 + "|"]
    order = list(positional.REGISTRY)
    for (enc, window), c in sorted(checks.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
        mem = memory.get(enc) if window == 0 else None
        cells = ([f"failed: {c['error'][:60]}", "", "", ""] if "error" in c else
                 ["; ".join(",".join(c[k]) for k in ("eval_kernels", "train_kernels")), f"{c['eval_logits_rel']:.1e}",
                  f"{c['train_grad_rel']:.1e}", "yes" if c["decode_static_eq_forward"] else "no"])
        cells += [f"{mem['peak_bytes'] / 2 ** 20:.0f}", f"{mem['peak_bytes'] / memory['rope']['peak_bytes']:.2f}"] if mem \
            else ["", ""]
        lines.append(f"| {enc} | {window} | " + " | ".join(cells) + " |")
    lines.append(f"\n{' / '.join(sorted(names))}; differences relative to the largest magnitude, float32, "
                 f"against the same model on the CPU; the training step (4 layers x 4 heads x 128, batch 8, bfloat16) "
                 f"as its peak allocated on the GPU.")
    return "\n".join(lines) + "\n"


def decode_table(bench_json):
    """bench.py --sections=decode JSON: tokens/s per encoding and step, against nanoGPT's generate in the same process,
    and whether issue #22's bounds hold (eager static >= 3x, the best compiled step >= 5x)."""
    r = json.load(open(bench_json))
    lines = []
    for shape, block in r["decode"].items():
        rows = block["rows"]
        ng = rows["nanoGPT"]["nanogpt"]["tokens_per_s"]
        lines += [f"| encoding ({shape}) | reference | static | compiled | aot | static / nanoGPT | best compiled / nanoGPT "
                  "| >= 3x / >= 5x |", "|---" * 8 + "|"]
        for enc, modes in rows.items():
            if enc == "nanoGPT":
                continue
            tps = {m: modes[m]["tokens_per_s"] if m in modes else None for m in ("reference", "static", "compiled", "aot")}
            best = max((tps[m] or 0) for m in ("compiled", "aot"))
            cells = " | ".join(f"{v:,.0f}" if v else "-" for v in tps.values())
            three, five = tps["static"] / ng, best / ng
            known = GPT(GPTConfig(n_layer=1, n_head=4, n_embd=32, block_size=int(shape.split(":")[1].split()[0]),
                                  vocab_size=8, pos_encoding=enc)).max_positions
            cached = known is None or known > r["args"]["gen_tokens"]   # else past them it re-encodes, as nanoGPT
            bounds = (f"{'yes' if three >= 3 else 'no'} / {('yes' if five >= 5 else 'no') if best else '-'}" if cached
                      else "n/a: no cache past the block")
            lines.append(f"| {enc} | {cells} | {three:.1f}x | {f'{five:.1f}x' if best else '-'} | {bounds} |")
        lines.append(f"| nanoGPT generate | | | | | {ng:,.0f} tokens/s | | |")
    a, m = r["args"], r["machine"]
    lines.append(f"\n{m.get('name', 'unnamed machine')}, torch {m['torch']}, {m['threads']} thread(s), {a['gen_tokens']} tokens "
                 f"from one, window {a['decode_window']}, median of {a['rounds']} rounds; every step drew the reference's "
                 f"tokens: {all(v.get('same_tokens') is not False for b in r['decode'].values() for e in b['rows'].values() for v in e.values())}.")
    return "\n".join(lines) + "\n"


def paired_block(eval_csv):
    """compare_report's paired table of the report folder holding eval_csv (and eval_chunks.csv, if any)."""
    from measure.compare_report import paired_rows, paired_table, read_eval
    return "\n".join(paired_table(paired_rows(read_eval(os.path.dirname(eval_csv))))) + "\n"


def published_block(eval_chunks_csv):
    """The published-behaviours table of the report folder holding eval_chunks_csv (L: its shortest length)."""
    from measure import published
    from measure.compare_report import read_eval
    rows = read_eval(os.path.dirname(eval_chunks_csv))
    return "\n".join(published.lines(rows, min(r["length"] for r in rows))) + "\n"


def recipe_lines(report_md):
    """The recipe and evaluation lines of a compare report."""
    return "".join(line for line in open(report_md) if line.startswith(("- recipe:", "- evaluation:")))


def wall_line(report_md):
    """The runs-and-wall-time line of a task suite's report."""
    return "".join(line for line in open(report_md) if "Wall time of this call" in line)


GENERATORS = {"reports/compare/runs.csv": ppl_table, "reports/compare-family/runs.csv": ppl_table,
              "reports/compare-cpu/runs.csv": ppl_table, "reports/compare-cpu/report.md": recipe_lines,
              "reports/compare-cpu/eval_chunks.csv": published_block,
              "reports/compare-code/runs.csv": ppl_table, "reports/compare-code/report.md": recipe_lines,
              "reports/compare-code/eval_chunks.csv": published_block,
              "reports/compare/eval.csv": paired_block, "reports/compare/report.md": recipe_lines,
              "reports/tasks/runs.csv": mastery_table, "reports/tasks-suite/runs.csv": mastery_table, "reports/tasks-suite/report.md": wall_line, "reports/tasks-recipes/trials.csv": recipe_trials_table,
              "benchmarks/raw/issue22_decode": decode_table, "benchmarks/raw/gpu_h200/": gpu_table, "benchmarks/raw/issue22_64k/": long_table, "benchmarks/raw/issue22_16384_32768_default/": long_table, "benchmarks/raw/issue22_train_memory": train_memory_table,
              "benchmarks/raw/": train_step_table}


def generate(src):
    """The block for a marker's sources (space separated, relative to the repo root)."""
    paths = src.split()
    gen = next(g for prefix, g in GENERATORS.items() if paths[0].startswith(prefix))
    return gen(*(os.path.join(ROOT, p) for p in paths))


def regenerated(text):
    return BLOCK.sub(lambda m: f"<!-- generated from {m['src']} -->\n{generate(m['src'])}<!-- end -->", text)


@pytest.mark.parametrize("page", PAGES)
def test_generated_blocks_match_their_sources(page):
    text = read(page)
    for m in BLOCK.finditer(text):
        assert m["body"] == generate(m["src"]), (
            f"{page}: the block generated from {m['src']} differs from the data; run python -m tests.test_docs")


def test_results_page_holds_generated_tables():
    assert len(list(BLOCK.finditer(read("docs/results.md")))) >= 1


def test_recipe_trials_table_by_hand(tmp_path):
    p = tmp_path / "trials.csv"
    p.write_text("task,encoding,seed,max_iters,learning_rate,warmup_iters,exact_at_L,samples,train_s\n"
                 "copy,rope,1337,2500,0.001,100,0.95,200,90\ncopy,none,1338,800,0.003,50,0.949,200,30\n")
    want = ["| `copy` | rope | 1337 | 2500 | 0.001 | — | 95.0% | yes | 90 |",
            "| `copy` | none | 1338 | 800 | 0.003 | — | 94.9% | no | 30 |"]
    assert recipe_trials_table(p).splitlines()[2:] == want
    p.write_text("task,encoding,seed,max_iters,learning_rate,warmup_iters,exact_at_L,samples,train_s,other\n"
                 "mqar,rope,1337,8000,0.001,100,0.5,200,90,n_head=1\n")
    want = "| `mqar` | rope | 1337 | 8000 | 0.001 | n_head=1 | 50.0% | no | 90 |"
    assert recipe_trials_table(p).splitlines()[2] == want


def test_ppl_table_by_hand(tmp_path):
    p = tmp_path / "runs.csv"
    p.write_text("label,encoding,seed,ppl@8,ppl@16\na,a,1,2.0,3.0\na,a,2,4.0,5.0\na+x,a,1,9,9\nb,b,1,1.0,nan\n"
                 "3-gram,ngram,,7.0,7.5\n")
    assert ppl_table(p).splitlines()[2:] == ["| a | 2 | 3.00 ± 1.41 | 4.00 ± 1.41 |", "| b | 1 | 1.00 | — |",
                                             "| 3-gram | 1 | 7.00 | 7.50 |"]


# ---------------------------------------------------------------- links

def anchors(rel):
    """GitHub's anchors of a markdown file's headings."""
    heads = re.findall(r"^#+ (.+)$", read(rel), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    bad = []
    for target in LINK.findall(read(page)):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        rel = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(os.path.join(ROOT, rel)):
            bad.append(f"{target} (no {rel})")
        elif anchor and rel.endswith(".md") and anchor not in anchors(rel):
            bad.append(f"{target} (no heading #{anchor} in {rel})")
    assert not bad, f"{page}: {bad}"


# ---------------------------------------------------------------- the encodings example

def code_shape(source):
    """The AST of source without docstrings (comments are not in the AST)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            node.body = body[1:]
    return ast.dump(tree)


def test_encodings_example_is_the_one_test_settings_trains():
    from tests.test_settings import README_EXAMPLE
    shown = [b for b in re.findall(r"```python\n(.*?)```", read("docs/encodings.md"), re.S) if "class Capped" in b]
    assert len(shown) == 1 and code_shape(shown[0]) == code_shape(README_EXAMPLE)


def test_docs_python_snippets_without_a_file_name_run():
    """The ```python blocks of docs/ that are not a file to write (no `# path.py` first line) run as shown."""
    ran = 0
    for page in PAGES:
        for block in re.findall(r"```python\n(.*?)```", read(page), re.S):
            if not re.match(r"# [\w/]+\.py\n", block) and "import *" not in block:
                exec(compile(block, page, "exec"), {})
                ran += 1
    assert ran >= 1


# ---------------------------------------------------------------- the commands

# README lines starting with `python ` that this test does not run, and why. (`torchrun ...` lines, in
# docs/training.md only, are not `python ` lines: several processes; tests/test_resume.py runs a 2-process one.)
SKIPPED = {"python -m pytest": "the test command itself (it would run this test again)",
           "python -m venv": "creates a virtual environment, not a project command"}


def tiny_keys(argv, data_dir, tmp):
    """Size keys appended to a README command so that it runs in seconds (later keys win)."""
    model = ["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--batch_size=2", "--device=cpu"]
    train = [*model, f"--data_dir={data_dir}", "--dataset=docs", "--max_iters=2", "--lr_decay_iters=2",
             "--warmup_iters=1", "--eval_interval=1", "--eval_iters=1", "--log_interval=1"]
    script, rest = argv[0], argv[1:]
    if "--help" in rest:
        return []
    if script == "train.py":   # the config's out_dir, unless the command names one, moves under tmp too
        named = re.search(r'^out_dir = "(.+)"', read(rest[0]), re.M) if rest and rest[0].endswith(".py") else None
        return train + ([f"--out_dir={tmp}/{named[1]}"] if named and not any("--out_dir=" in a for a in rest) else [])
    if script == "sample.py":
        return ["--max_new_tokens=8", "--device=cpu"]
    if script == "evaluate.py":
        task = any(os.path.basename(a).startswith("out-task") for a in rest)
        return (["--lengths=16,32", "--samples=4"] if task else ["--lengths=16,32", "--tokens_per_point=64"]) + [
            "--device=cpu", f"--report_dir={tmp}/report-{len(os.listdir(tmp))}"]
    if script == "compare.py" and any("configs/tasks/" in a for a in rest):
        return [*train, "--tasks=copy", "--encodings=rope", "--seeds=1", "--samples=4", "--multiples=1,2",
                "--jobs=1", "--threads=1", f"--out_root={tmp}/out-tasks", f"--report_dir={tmp}/report-tasks"]
    if script == "compare.py":   # (a config's report_dir, e.g. reports/compare-cpu, is the repository's: not here)
        return [*train, "--only=rope", "--seeds=1", "--eval_lengths=16,32", "--eval_tokens=64", "--rope_scalings=",
                "--finetune_iters=0", "--context_use=False", "--context_labels=", "--plots=False", "--jobs=1",
                "--threads=1", f"--out_root={tmp}/out-compare", f"--report_dir={tmp}/report-compare"]
    if argv[:2] == ["-m", "measure.plots"]:
        return ["--head_dim=8", "--n_head=2", "--length=32", "--bases=1e4"]
    return []


def in_tmp(arg, tmp):
    """Output folders named in the README (out-rope, plots/) moved under tmp."""
    key, eq, value = arg.rpartition("=") if arg.startswith("--") else ("", "", arg)
    if re.fullmatch(r"out-[\w-]+|plots/?", value):
        return f"{key}{eq}{tmp}/{value}"
    return arg


@pytest.fixture(scope="module")
def docs_data(tmp_path_factory):
    from data.shakespeare_char.prepare import prepare
    d = tmp_path_factory.mktemp("docs_data")
    prepare("ROMEO:\nWhat light through yonder window breaks?\n\n" + TINY_TEXT, d / "docs")
    return d


@pytest.mark.slow
def test_readme_commands_run_at_tiny_size(docs_data, tmp_path):
    ran, skipped = [], []
    for line in commands("README.md"):
        reason = next((why for prefix, why in SKIPPED.items() if line.startswith(prefix)), None)
        if reason:
            skipped.append(line)
            continue
        argv = [in_tmp(a, tmp_path) for a in shlex.split(line)[1:]]
        r = run_py(*argv, *tiny_keys(argv, docs_data, tmp_path), check=False, timeout=600,
                   env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
        assert r.returncode == 0, f"README: `{line}` exited {r.returncode}\n{r.stderr[-2000:]}"
        ran.append(line)
    assert ran and {"python -m pytest"} <= set(skipped), (ran, skipped)


def test_readme_shows_install_and_test_command_on_the_first_screen():
    first = "\n".join(read("README.md").splitlines()[:45])
    for must in ("pip install torch", "pip install -r requirements.txt", "python train.py configs/rope.py",
                 "python -m pytest"):
        assert must in first, must
    assert len(read("README.md").splitlines()) <= 200


@pytest.mark.slow
def test_every_key_in_the_docs_is_listed_by_its_help():
    keys = {}
    for page in PAGES:
        for line in commands(page):
            argv = shlex.split(line)[1:]
            if any(line.startswith(p) for p in SKIPPED):
                continue
            cli = tuple(argv[:2]) if argv[0] == "-m" else (argv[0],)
            keys.setdefault(cli, set()).update(m[1] for a in argv if (m := re.match(r"--(\w+)", a)) and m[1] != "help")
    missing = []
    for cli, used in keys.items():
        help_text = run_py(*cli, "--help", check=False, timeout=120)
        if help_text.returncode != 0:
            missing.append(f"{' '.join(cli)} --help exited {help_text.returncode}")
            continue
        missing += [f"{' '.join(cli)}: --{k}" for k in sorted(used) if not re.search(rf"\b{k}\b", help_text.stdout)]
    assert not missing, missing


if __name__ == "__main__":   # python -m tests.test_docs: rewrite every generated block from its source
    for page in PAGES:
        text = read(page)
        new = regenerated(text)
        if new != text:
            with open(os.path.join(ROOT, page), "w", encoding="utf-8") as f:
                f.write(new)
            print(f"updated {page}", file=sys.stderr)
