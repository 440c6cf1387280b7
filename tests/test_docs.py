"""The docs against the code and the data.

- Every ```-fenced `python ...` command of README.md runs as written, at tiny size (size keys
  appended, output folders moved to a temp dir), in README order, and exits 0.
- Every `--key` of a command in README.md and docs/ is listed by that command's --help.
- Every relative link (and #anchor) in README.md, docs/ and benchmarks/ resolves.
- Every generated block (`<!-- generated from SOURCE... -->` ... `<!-- end -->`) of those pages equals what
  tools/docs.py makes of SOURCE now: no number on a page drifts from its CSV or JSON.
- docs/encodings.md's "Adding an encoding" code is the one tests/test_settings.py trains.

After a new report or benchmark, regenerate the blocks: python -m tools.docs
"""
import ast
import os
import re
import shlex

import pytest

from tests.conftest import ROOT, TINY_TEXT, run_py
from tools import docs

PAGES = docs.DOCS   # README.md and docs/: the pages whose commands and snippets run
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


# ---------------------------------------------------------------- generated blocks (tools/docs.py)

@pytest.mark.parametrize("page", docs.PAGES)
def test_generated_blocks_match_their_sources(page):
    text = read(page)
    for m in docs.BLOCK.finditer(text):
        assert m["body"] == docs.generate(m["src"]), (
            f"{page}: the block generated from {m['src']} differs from the data; run python -m tools.docs")


def test_results_page_holds_generated_tables():
    assert len(list(docs.BLOCK.finditer(read("docs/results.md")))) >= 1


def test_recipe_trials_table_by_hand(tmp_path):
    p = tmp_path / "trials.csv"
    p.write_text("task,encoding,seed,max_iters,learning_rate,warmup_iters,exact_at_L,samples,train_s\n"
                 "copy,rope,1337,2500,0.001,100,0.95,200,90\ncopy,none,1338,800,0.003,50,0.949,200,30\n")
    want = ["| `copy` | rope | 1337 | 2500 | 0.001 | — | 95.0% | yes | 90 |",
            "| `copy` | none | 1338 | 800 | 0.003 | — | 94.9% | no | 30 |"]
    assert docs.recipe_trials_table(p).splitlines()[2:] == want
    p.write_text("task,encoding,seed,max_iters,learning_rate,warmup_iters,exact_at_L,samples,train_s,other\n"
                 "mqar,rope,1337,8000,0.001,100,0.5,200,90,n_head=1\n")
    want = "| `mqar` | rope | 1337 | 8000 | 0.001 | n_head=1 | 50.0% | no | 90 |"
    assert docs.recipe_trials_table(p).splitlines()[2] == want


def test_train_memory_lengths_by_hand(tmp_path):
    """One row per run and length, before first; each encoding's peak and step against rope's in its file."""
    import json
    args = dict(n_layer=4, n_head=4, n_embd=128, batch_size=1, rounds=2)
    machine = dict(name="X", torch="2", threads=1)
    for name, rope, cope in [("after_L2048", (400, 10, 5), (500, 30, 20)), ("before_L1024", (300, 5, 4), (900, 20, 4))]:
        memory = {e: dict(peak_bytes=mib * 2 ** 20, s=1.0) for e, (mib, _, _) in (("rope", rope), ("cope", cope))}
        train = {e: dict(ms=ms, cpu_ms=cpu) for e, (_, ms, cpu) in (("rope", rope), ("cope", cope))}
        run = dict(args=args, machine=machine, train_memory=memory, train=train)
        (tmp_path / f"{name}.json").write_text(json.dumps(run))
    assert docs.train_memory_lengths(tmp_path).splitlines()[:4] == [
        "| run | tokens | rope MiB | rope ms | cope MiB | vs rope | cope ms | vs rope | CPU vs rope |",
        "|---" * 9 + "|",
        "| before | 1,024 | 300 | 5 | 900 | 3.00 | 20 | 4.00 | 1.00 |",
        "| after | 2,048 | 400 | 10 | 500 | 1.25 | 30 | 3.00 | 4.00 |"]


def test_exact_table_by_hand(tmp_path):
    p = tmp_path / "runs.csv"
    p.write_text("task,encoding,seed,length,exact,token,samples,learned,train_s\n"
                 "addition,a,1,32,1.0,1.0,200,True,9\naddition,a,1,64,0.5,0.9,200,True,9\n"
                 "addition,a,2,32,0.9,0.99,200,False,9\naddition,a,2,64,0.0,0.6,200,False,9\n"
                 "addition,b,1,32,0.25,0.7,200,False,9\naddition,b,1,64,,,200,False,9\n")
    assert docs.exact_table(p).splitlines() == [
        "| encoding | seeds | learned at L | exact @32 | exact @64 |", "|---|---|---|---|---|",
        "| a | 2 | 1 of 2 | 95.0 ± 7.1 | 25.0 ± 35.4 |", "| b | 1 | 0 of 1 | 25.0 | — |"]


def test_ppl_table_by_hand(tmp_path):
    p = tmp_path / "runs.csv"
    p.write_text("label,encoding,seed,ppl@8,ppl@16\na,a,1,2.0,3.0\na,a,2,4.0,5.0\na+x,a,1,9,9\nb,b,1,1.0,nan\n"
                 "3-gram,ngram,,7.0,7.5\n")
    assert docs.ppl_table(p).splitlines()[2:] == ["| a | 2 | 3.00 ± 1.41 | 4.00 ± 1.41 |", "| b | 1 | 1.00 | — |",
                                             "| 3-gram | 1 | 7.00 | 7.50 |"]
    assert docs.label_table(p).splitlines()[3] == "| a+x | 1 | 9.00 | 9.00 |"   # a method's row, after its encoding


def test_protocol_table_ranks_the_encodings_at_the_longest_length_by_hand(tmp_path):
    p = tmp_path / "runs.csv"
    p.write_text("label,encoding,seed,wall_s,ppl@8,ppl@16\na,a,1,60,2.0,3.0\na,a,2,180,4.0,5.0\na+x,a,1,,1,1\n"
                 "c,c,1,600,1.0,2.0\nb,b,1,60,1.0,nan\n3-gram,ngram,,,7.0,1.5\n")
    *table, blank, line = docs.protocol_table(p).splitlines()
    assert table == docs.ppl_table(p).splitlines() and blank == ""
    # a: means 3 at 8, 4 at 16, 2 min; c: 1, 2, 10 min; b has no ppl@16; rows of a method and the n-gram are not ranked
    assert line == ("By ppl@16, lowest first (each over its own ppl@8): c 2.00 (2.00x its ppl@8; trained in 10 min), "
                    "a 4.00 (1.33x its ppl@8; trained in 2 min).")


# ---------------------------------------------------------------- links

def anchors(rel):
    """GitHub's anchors of a markdown file's headings."""
    heads = re.findall(r"^#+ (.+)$", read(rel), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", docs.PAGES)   # benchmarks/ too: its pages link into the docs and back
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
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)):
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
           "python -m venv": "creates a virtual environment, not a project command",
           "python compare.py configs/compare_registry.py": "111 runs even at tiny size, and its 4-layer variants need "
                                                           "4 layers: test_compare plans it and checks its kept runs"}


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
