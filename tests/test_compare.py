"""compare.py end to end on tiny data: report, CSVs and PNGs with both runs; a second
invocation skips finished runs; a longer budget resumes; bad input gets one line."""
import ast
import csv
import glob
import json
import math
import os
import shutil
import subprocess

import pytest
import torch

import compare
from measure import compare_report, tables
from measure import kept as kept_store
from tests.conftest import ROOT, TINY_ARGS, run_py
from tests.wandb_reader import history

PNG = b"\x89PNG\r\n\x1a\n"


def args(tiny_data, out_root, *extra):
    tiny = [a for a in TINY_ARGS if not a.startswith(("--max_iters", "--eval_interval"))]
    return ["compare.py", "configs/compare.py", *tiny, f"--data_dir={tiny_data}", f"--out_root={out_root}",
            "--only=rope,learned", "--max_iters=20", "--eval_interval=10", "--lr_decay_iters=0",
            "--eval_lengths=[16,32,64]", "--eval_tokens=256", "--seeds=1", "--jobs=1", "--threads=0",
            "--rope_scalings=['linear','ntk','yarn']", "--rope_factor=0.0", "--finetune_iters=0",
            "--context_use=False", "--context_labels=[]", "--scaled_encodings=[]", "--retrieval_probe=False", *extra]


@pytest.mark.slow
def test_compare_trains_reports_skips_and_resumes(tiny_data, tmp_path):
    out = tmp_path / "cmp"
    env = {"OMP_NUM_THREADS": "1"}
    r = run_py(*args(tiny_data, out), env=env)
    assert "[1/2 rope s1337] training" in r.stdout and "[2/2 learned s1337] iter 20/20" in r.stdout

    report = (out / "report" / "report.md").read_text()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert f"`{head}" in report and "python compare.py configs/compare.py" in report
    table = [line for line in report.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| encoding | params | train loss | val loss | val bits/byte | tok/s | wall "
                               "| ppl@16 (train)")
    rows = {line.split(" | ")[0][2:].removesuffix(" †"): line for line in table[1:]}   # †: worse than the 4-gram
    assert {"rope", "learned", "rope+linear", "rope+ntk", "rope+yarn"} <= set(rows)
    assert rows["learned"].rstrip(" |").endswith("— | —")  # a 16-position table cannot reach 32 or 64
    assert "—" not in rows["rope"]

    with open(out / "report" / "runs.csv") as f:
        runs = {row["label"]: row for row in csv.DictReader(f)}
    for label in ("rope", "learned"):
        run = runs[label]
        ckpt = torch.load(out / f"{label}-s1337" / "ckpt.pt", weights_only=False)
        assert float(run["val_loss"]) == pytest.approx(ckpt["val_loss"])  # the log agrees with the checkpoint
        assert float(run["val_bpb"]) == pytest.approx(ckpt["val_loss"] / math.log(2))  # ASCII characters: 1 byte each
        assert float(run["ppl@16"]) > 1 and float(run["tokens_per_sec"]) > 0 and float(run["wall_s"]) > 0
    assert float(runs["learned"]["params"]) > 0 and runs["learned"]["ppl@64"] in ("", "nan")
    with open(out / "report" / "eval.csv") as f:
        labels = {row["label"] for row in csv.DictReader(f)}
    assert labels == {"rope", "rope+linear", "rope+ntk", "rope+yarn", "learned", "3-gram", "4-gram", "5-gram"}
    assert {"3-gram", "4-gram", "5-gram"} <= set(rows) and float(runs["5-gram"]["ppl@16"]) > 1
    with open(out / "report" / "eval_chunks.csv") as f:   # 256 targets: 4 chunks of the longest length, 64
        chunks = {(r["label"], r["length"]): [float(v) for k, v in r.items() if k.startswith("chunk")]
                  for r in csv.DictReader(f)}
    with open(out / "report" / "eval.csv") as f:
        losses = {(r["label"], r["length"]): float(r["loss"]) for r in csv.DictReader(f) if r["loss"] != "nan"}
    assert set(chunks) == set(losses) and {len(c) for c in chunks.values()} == {4}
    assert all(sum(chunks[k]) / 4 == pytest.approx(loss, abs=1e-6) for k, loss in losses.items())
    with open(out / "report" / "paired.csv") as f:
        paired = {(r["label"], r["reference"], r["length"]): r for r in csv.DictReader(f)}
    assert set(paired) == {("learned", "rope", "16")} | {(f"rope+{m}", "rope", n) for m in ("linear", "ntk", "yarn")
                                                        for n in ("16", "32", "64")}
    assert {r["interval"] for r in paired.values()} == {"t over 4 units (one seed: the seeds' spread is not in it)"}
    assert "## Paired differences" in report
    for r in paired.values():   # one seed: the interval is Student's t over the chunks
        assert (r["result"] == "True") == (float(r["q"]) < 0.05)   # Benjamini-Hochberg across the cells
        assert float(r["lo"]) <= float(r["mean"]) <= float(r["hi"])   # false for NaN too
    pngs = ["val_loss", "ppl_vs_length", "encodings/rope_decay", "encodings/expected_logits",
            "encodings/rope_angles", "encodings/alibi_bias", "encodings/learned_trained_similarity"]
    for name in pngs:
        data = (out / "report" / f"{name}.png").read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, name
        assert f"({name}.png)" in report, name

    # second invocation: nothing trained or evaluated again (the results kept in the report folder)
    stamp = {p: os.path.getmtime(p) for p in glob.glob(str(out / "*-s1337" / "*.*"))}
    r = run_py(*args(tiny_data, out), env=env)
    assert r.stdout.count(f"kept in {out / 'report' / 'runs'}") == 2, r.stdout
    assert "iter " not in r.stdout and "training" not in r.stdout
    assert stamp == {p: os.path.getmtime(p) for p in glob.glob(str(out / "*-s1337" / "*.*"))}

    # a larger budget resumes the rope run from its checkpoint, and logs the evaluation to wandb
    wenv = dict(env, WANDB_MODE="offline", HOME=str(tmp_path), NETRC=str(tmp_path / "none"))
    r = run_py(*args(tiny_data, out, "--only=rope", "--max_iters=30", "--wandb_log=True"), env=wenv)
    assert "[1/1 rope s1337] training to iter 30 (resuming from iter 20)" in r.stdout and "iter 30/30" in r.stdout
    ckpt = torch.load(out / "rope-s1337" / "ckpt.pt", weights_only=False)
    assert ckpt["iter_num"] == 30
    ckpt_val_loss = ckpt["val_loss"]
    log = [json.loads(line) for line in open(out / "rope-s1337" / "log.jsonl")]
    assert [row["iter"] for row in log if row["event"] == "start"] == [0, 20]
    tables = [row for f in glob.glob(str(out / "rope-s1337" / "wandb" / "offline-run-*" / "run-*.wandb"))
              for row in history(f) if "eval/ppl_by_length/nrows" in row]
    assert len(tables) == 1 and tables[0]["eval/ppl_by_length/nrows"] == 4 * 3  # 4 labels x 3 lengths

    # another machine: the run folders (checkpoints) gone, the report folder committed: the same report, nothing run
    report_files = {n: (out / "report" / n).read_text() for n in ("eval.csv", "eval_chunks.csv", "paired.csv")}
    kept = kept_store.read(out / "report" / "runs" / "rope-s1337")
    assert kept["settings"]["iters"] == 30 and {r["label"] for r in kept["value"]["rows"]} == {
        "rope", "rope+linear", "rope+ntk", "rope+yarn"}
    assert kept["summary"]["val_loss"] == pytest.approx(ckpt_val_loss) and len(kept["summary"]["curve"]) > 1
    assert not glob.glob(str(out / "report" / "runs" / "*" / "log.jsonl"))   # a summary is kept, not the log
    for folder in glob.glob(str(out / "*-s1337")):
        shutil.rmtree(folder)
    r = run_py(*args(tiny_data, out, "--only=rope", "--max_iters=30"), env=env)
    assert "kept in" in r.stdout and "training" not in r.stdout and not (out / "rope-s1337").exists(), r.stdout
    assert report_files == {n: (out / "report" / n).read_text() for n in report_files}
    with open(out / "report" / "runs.csv") as f:   # the training metrics from the kept summary
        assert float(next(csv.DictReader(f))["val_loss"]) == pytest.approx(ckpt_val_loss)
    # an interim report of what is kept: learned was kept at 20 iterations, not the 30 asked for, and is left out
    r = run_py(*args(tiny_data, out, "--max_iters=30", "--kept_only=True"), env=env)
    assert "compare: 1 runs kept in" in r.stdout and "training" not in r.stdout, r.stdout
    assert not (out / "learned-s1337").exists() and report_files == {n: (out / "report" / n).read_text()
                                                                      for n in report_files}


@pytest.mark.slow
def test_side_by_side_runs_equal_one_after_the_other(tiny_data, tmp_path):
    """--jobs=2 trains and evaluates the runs concurrently, one thread each; every number equals
    the serial run's (same seeds, same single-threaded kernels), each in its own folder."""
    evals = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        r = run_py(*args(tiny_data, out, "--only=rope,alibi", "--rope_scalings=[]", f"--jobs={jobs}",
                         "--threads=1", "--plots=False"), env={"OMP_NUM_THREADS": "1"})
        assert f"{jobs} side by side with 1 thread(s) each" in r.stdout
        with open(out / "report" / "eval.csv") as f:
            evals[jobs] = sorted(tuple((k, v) for k, v in row.items() if k != "out_dir") for row in csv.DictReader(f))
        for enc in ("rope", "alibi"):
            ckpt = torch.load(out / f"{enc}-s1337" / "ckpt.pt", weights_only=False)
            assert ckpt["config"]["pos_encoding"] == enc and ckpt["iter_num"] == 20
    assert evals[1] == evals[2] and len(evals[1]) == (2 + 3) * 3  # 2 encodings and 3 n-gram baselines x 3 lengths


def main_error(argv, capsys):
    with pytest.raises(SystemExit) as e:
        compare.main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


@pytest.mark.parametrize("extra, message", [
    (["--only=rotary"], "unknown encoding 'rotary'; valid: none, learned"),
    (["--out_dir=x"], "'out_dir' is set by compare.py"),
    (["--seeds=two"], "compare key 'seeds' wants an integer, got 'two'"),
    (["--plots=ture"], "compare key 'plots' wants True or False"),
    (["--eval_lengths=[0]"], "positive integer eval_lengths"),
    (["--n_layr=2"], "did you mean 'n_layer'?"),
    (["--jobs=0"], "--jobs must be >= 1, got 0"),
])
def test_bad_input_one_line(extra, message, tiny_data, tmp_path, capsys):
    assert message in main_error(args(tiny_data, tmp_path / "cmp", *extra)[1:], capsys)
    assert not os.listdir(tmp_path)


@pytest.mark.slow
def test_changed_recipe_is_refused_before_training(tiny_data, tmp_path, capsys):
    run_dir = tmp_path / "rope-s1337"
    run_py("train.py", *TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={run_dir}", "--max_iters=5")
    before = (run_dir / "ckpt.pt").read_bytes()
    err = main_error(args(tiny_data, tmp_path, "--only=rope", "--n_embd=64")[1:], capsys)
    assert "was trained with n_embd=32, this comparison asks for 64; use another --out_root" in err
    assert (run_dir / "ckpt.pt").read_bytes() == before


def test_read_log_sums_segments_and_keeps_the_latest_eval(tmp_path):
    rows = [dict(event="start", iter=0, params=100, elapsed=0.0),
            dict(event="eval", iter=0, tokens=0, train_loss=4.0, val_loss=4.1, elapsed=1.0),
            dict(event="train", iter=5, tokens=50, tokens_per_sec=10.0, elapsed=2.0),
            dict(event="train", iter=10, tokens=100, tokens_per_sec=30.0, elapsed=4.0),
            dict(event="eval", iter=10, tokens=100, train_loss=3.0, val_loss=3.1, elapsed=5.0),
            dict(event="train", iter=15, tokens=150, tokens_per_sec=20.0, elapsed=7.0),   # then interrupted
            dict(event="start", iter=10, params=100, elapsed=0.0),
            dict(event="train", iter=15, tokens=150, tokens_per_sec=40.0, elapsed=3.0),
            dict(event="eval", iter=20, tokens=200, train_loss=2.0, val_loss=2.5, elapsed=6.0)]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    m = compare_report.read_log(tmp_path)
    assert m["wall_s"] == 7.0 + 6.0 and m["params"] == 100
    assert (m["train_loss"], m["val_loss"]) == (2.0, 2.5)
    assert m["curve"] == [(0, 4.1), (100, 3.1), (200, 2.5)]
    assert m["tokens_per_sec"] == 30.0  # median of 30, 20, 40 (the first interval is warm-up)
    (tmp_path / "log.jsonl").unlink()  # a run from before log.jsonl existed: no numbers, no crash
    assert math.isnan(compare_report.read_log(tmp_path)["val_loss"])


def test_mean_and_spread():
    assert tables.fmt([1.0, 2.0, 3.0], ".2f") == "2.00 ± 1.00"
    assert tables.fmt([5.0], ".1f") == "5.0"
    assert tables.fmt([float("nan")], ".1f") == "—"


def test_report_of_several_seeds(tmp_path):
    """Two seeds of one encoding: the table shows mean ± std, the CSV one row per seed."""
    from types import SimpleNamespace
    results = []
    for seed, val, ppl in [(1, 2.0, 10.0), (2, 3.0, 14.0)]:
        run_dir = tmp_path / f"rope-s{seed}"
        run_dir.mkdir()
        rows = [dict(event="start", iter=0, params=1000, elapsed=0.0),
                dict(event="train", iter=5, tokens=80, tokens_per_sec=100.0, elapsed=1.0),
                dict(event="eval", iter=10, tokens=160, train_loss=val - 0.1, val_loss=val, val_bpb=val / 2,
                     elapsed=2.0)]
        (run_dir / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        evals = [dict(label="rope", length=16, ppl=ppl), dict(label="rope", length=32, ppl=2 * ppl),
                 dict(label="rope+yarn", length=16, ppl=ppl + 1), dict(label="rope+yarn", length=32, ppl=ppl + 2)]
        results.append(dict(encoding="rope", seed=seed, dir=str(run_dir), rows=evals, command="python train.py"))
    settings = dict(report_dir=str(tmp_path / "report"), eval_lengths=[16, 32], seed_list=[1, 2], plots=False,
                    eval_mode="nonoverlap", eval_tokens=64, rope_factor=2.0, finetune_len=0)
    cfg = SimpleNamespace(block_size=16, dataset="tiny", n_layer=1, n_head=2, n_embd=32, max_iters=10, batch_size=1)
    failed = [(dict(encoding="alibi", seed=1), "train.py exited 1")]
    md = open(compare_report.write(results, failed, settings, cfg, "python compare.py")).read()
    assert ("| rope | 0.001M | 2.4000 ± 0.7071 | 2.5000 ± 0.7071 | 1.2500 ± 0.3536 | 100 ± 0 | 2 ± 0 s | 12.00 ± 2.83 "
            "| 24.00 ± 5.66 |") in md
    assert "| rope+yarn | (same runs) |  |  |  |  |  | 13.00 ± 2.83 | 14.00 ± 2.83 |" in md
    assert "mean ± std over 2 seeds" in md and "- alibi seed 1: train.py exited 1" in md
    with open(tmp_path / "report" / "runs.csv") as f:
        assert [(r["label"], r["seed"]) for r in csv.DictReader(f)] == [("rope", "1"), ("rope", "2"),
                                                                         ("rope+yarn", "1"), ("rope+yarn", "2")]
    assert (tmp_path / "report" / "ppl_vs_length.png").read_bytes().startswith(PNG)


@pytest.mark.slow
def test_variants_train_with_their_keys_and_share_the_out_root(tiny_data, tmp_path):
    """A variant is a name and its training keys: it trains with them, is reported under its
    name, and a later comparison in the same out_root reuses every finished run."""
    out, env = tmp_path / "cmp", {"OMP_NUM_THREADS": "1"}
    variants = ("--variants={'rope_qk': {'pos_encoding': 'rope', 'qk_norm': True}, "
                "'alibi_w8': {'pos_encoding': 'alibi', 'window': 8}}")
    run_py(*args(tiny_data, out, "--max_iters=4", "--only=rope", "--rope_scalings=[]"), env=env)
    r = run_py(*args(tiny_data, out, "--max_iters=4", "--only=rope,rope_qk,alibi_w8", "--rope_scalings=['yarn']",
                     "--scaled_encodings=['rope']", variants), env=env)
    assert "[1/3 rope s1337] already trained" in r.stdout and "[2/3 rope_qk s1337] training" in r.stdout
    for name, key, want in (("rope_qk", "qk_norm", True), ("alibi_w8", "window", 8), ("rope", "qk_norm", False)):
        a = torch.load(out / f"{name}-s1337" / "ckpt.pt", weights_only=False)["model_args"]
        assert a[key] == want and a["pos_encoding"] == name.split("_")[0]
    with open(out / "report" / "eval.csv") as f:
        labels = list(dict.fromkeys(row["label"] for row in csv.DictReader(f)))
    # yarn only where scaled_encodings says
    assert labels == ["rope", "rope+yarn", "rope_qk", "alibi_w8", "3-gram", "4-gram", "5-gram"]
    bad = run_py(*args(tiny_data, out, "--only=rope_qk"), env=env, check=False)
    assert bad.returncode == 2 and "unknown encoding 'rope_qk'" in bad.stderr and bad.stderr.count("\n") == 1


@pytest.mark.slow
def test_the_readmes_quick_comparison_runs(tiny_data, tmp_path):
    """`python compare.py configs/compare.py --only=rope,alibi --seeds=1 --finetune_iters=0`, at tiny size:
    the config's context labels of fine-tunes are left out (no fine-tuning), the others measured."""
    tiny = ["--dataset=tiny", f"--data_dir={tiny_data}", "--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16",
            "--batch_size=2", "--max_iters=2", "--eval_interval=2", "--eval_iters=1", "--eval_lengths=[16,32]",
            "--eval_tokens=32", "--context_tokens=32", "--context_sequences=1", "--plots=False", "--jobs=1",
            f"--out_root={tmp_path}", "--device=cpu"]
    r = run_py("compare.py", "configs/compare.py", "--only=rope,alibi", "--seeds=1", "--finetune_iters=0", *tiny,
               env={"OMP_NUM_THREADS": "1"})
    assert "compare: report in" in r.stdout
    with open(tmp_path / "report" / "context_gain.csv") as f:
        labels = list(dict.fromkeys(row["label"] for row in csv.DictReader(f)))
    # rope_4L: the reference
    assert labels == ["rope", "rope+ntk", "rope+yarn", "rope+leaky_rerope", "alibi", "rope_4L"]


def test_context_labels_that_no_run_can_have_are_refused():
    base = ["configs/compare.py", "--only=rope,alibi"]
    with pytest.raises(ValueError, match=r"'rope\+yarm' is not a label of this comparison"):
        compare.parse([*base, "--context_labels=['rope+yarm']"])
    with pytest.raises(ValueError, match=r"'alibi\+yarn' names a method that alibi does not take"):
        compare.parse([*base, "--context_use=False", "--context_labels=['alibi+yarn']"])


def test_the_task_suite_is_chosen_by_the_config():
    settings, _, cfg = compare.parse(["configs/tasks/quick.py"])
    assert settings["suite"] == "tasks" and settings["out_root"] == "out-tasks-quick"
    assert settings["lengths"] == [m * cfg.block_size for m in (1, 2, 4, 8)]
    assert compare.parse(["configs/compare.py"])[0]["suite"] == "lm"


@pytest.mark.slow
def test_compare_without_arguments_prints_the_usage_and_runs_nothing():
    r = run_py("compare.py", check=False)
    assert r.returncode == 2 and r.stderr.startswith("usage: python compare.py CONFIG_FILE") and r.stdout == ""


@pytest.mark.parametrize("config", ["configs/compare_cpu.py", "configs/compare_registry.py", "configs/compare_code.py",
                                    "configs/tasks/compare.py", "configs/tasks/passkey_pi.py"])
def test_the_committed_kept_runs_still_match_their_config(config):
    """Every run kept in the config's report folder matches its key there, so a later call anywhere takes it
    instead of training it again (a compare key added to DEFAULTS without NOT_MEASURED, or a changed default,
    would silently orphan hours of training)."""
    from measure import kept
    settings, train_keys, cfg = compare.parse([config])
    runs = [r for r in compare.plan(settings, train_keys)
            if kept.read(kept.folder(settings["report_dir"], r["tag"]))]
    assert runs, f"no kept run in {settings['report_dir']}/runs/"
    for r in runs:
        assert kept.load(kept.folder(settings["report_dir"], r["tag"]),
                         compare.kept_key(r, settings, train_keys, cfg), compare.NOT_MEASURED) is not None, r["tag"]


def test_the_gpu_suite_trains_with_the_keys_its_trials_learned_with():
    """configs/tasks/compare_gpu.py: parity and addition, every encoding and seed of the suite, each on the recipe
    that learned it in the GPU trials of reports/tasks-recipes/trials.csv (its keys, learning rate and iterations)."""
    from training.config import coerce
    settings, train_keys, _ = compare.parse(["configs/tasks/compare_gpu.py"])
    runs = compare.plan(settings, train_keys)
    assert len(runs) == 54 and {r["task"] for r in runs} == {"parity", "addition"}
    rows = [r for r in csv.DictReader(open(os.path.join(ROOT, "reports", "tasks-recipes", "trials.csv")))
            if "device=cuda" in (r["other"] or "") and float(r["exact_at_L"]) >= 0.95]

    def keys(row):
        other = dict(kv.split("=", 1) for kv in row["other"].split() if not kv.startswith(("device=", "stopped_at=")))
        return {k: coerce(k, ast.literal_eval(v)) for k, v in dict(other, max_iters=row["max_iters"],
                                                                   learning_rate=row["learning_rate"]).items()}
    for task, encodings in (("parity", {"rope", "learned"}), ("addition", {"none", "learned", "sinusoidal"})):
        recipe = {k: coerce(k, v) for k, v in settings["task_recipes"][task].items()}
        learned = [r["encoding"] for r in rows if r["task"] == task
                   and all(k in recipe and recipe[k] == v for k, v in keys(r).items())]
        assert set(learned) == encodings, (task, learned)
        assert all(r["keys"][k] == recipe[k] for r in runs if r["task"] == task for k in recipe)


def test_a_run_kept_by_a_call_over_fewer_tasks_is_taken_by_the_whole_suite(tmp_path):
    """`--tasks=passkey,mqar` (a subset of the suite) keeps its runs under settings that name those tasks; the whole
    suite's call takes them (the tasks of a call are not measured: a run's own task is in its training keys),
    while a key that is measured still orphans them."""
    from measure import kept
    settings, train_keys, cfg = compare.parse(["configs/tasks/compare.py", "--tasks=passkey,mqar",
                                               f"--report_dir={tmp_path}"])
    run = next(r for r in compare.plan(settings, train_keys) if r["task"] == "passkey")
    kept.save(kept.folder(str(tmp_path), run["tag"]), compare.kept_key(run, settings, train_keys, cfg),
              {"rows": [1]}, {})
    for extra, takes in (([], True), (["--samples=100"], False)):
        whole = compare.parse(["configs/tasks/compare.py", f"--report_dir={tmp_path}", *extra])
        same = next(r for r in compare.plan(*whole[:2]) if r["tag"] == run["tag"])
        got = kept.load(kept.folder(str(tmp_path), run["tag"]), compare.kept_key(same, *whole), compare.NOT_MEASURED)
        assert (got == {"rows": [1]}) is takes, extra
    assert kept.load(kept.folder(str(tmp_path), run["tag"]), compare.kept_key(same, *whole)) is None   # no ignore


@pytest.mark.parametrize("config", sorted(glob.glob(os.path.join(ROOT, "configs", "compare*.py")) + [
    os.path.join(ROOT, "configs", "tasks", f"{n}.py")
    for n in ("quick", "compare", "passkey_pi", "grid_compare", "distance")]))
def test_every_comparison_config_parses(config):
    """Each config file that compare.py is documented with is accepted whole, variants' encoding settings
    (grid_width of configs/tasks/grid_compare.py) included."""
    settings, train_keys, cfg = compare.parse([config])
    assert compare.plan(settings, train_keys)


def test_a_kept_result_is_compressed_the_same_bytes_each_time_and_a_plain_one_still_reads(tmp_path):
    """kept.save writes gzip-compressed JSON with no time stamp (the same result: the same bytes, so a rerun
    leaves git clean), smaller than the plain JSON; an older plain result.json is read as before and replaced
    by the compressed file when the run is kept again."""
    from measure import kept
    value = {"rows": [{"loss": 1.23456789, "curve": [2.0 + i / 7 for i in range(2000)]}]}
    kept.save(str(tmp_path / "a"), {"iters": 3}, value, {"val_loss": 1.5})
    kept.save(str(tmp_path / "b"), {"iters": 3}, value, {"val_loss": 1.5})
    a, b = ((tmp_path / f / kept.RESULT).read_bytes() for f in "ab")
    assert a == b and len(a) < len(json.dumps(kept.read(str(tmp_path / "a"))))
    assert kept.load(str(tmp_path / "a"), {"iters": 3}) == kept.rounded(value)
    plain = tmp_path / "old"
    plain.mkdir()
    (plain / kept.PLAIN).write_text(json.dumps({"settings": {"iters": 3}, "value": {"rows": []}}))
    assert kept.load(str(plain), {"iters": 3}) == {"rows": []} and kept.load(str(plain), {"iters": 4}) is None
    kept.save(str(plain), {"iters": 3}, {"rows": [1]}, None)
    assert sorted(os.listdir(plain)) == [kept.RESULT] and kept.load(str(plain), {"iters": 3}) == {"rows": [1]}


def test_the_registry_comparison_plans_every_encoding_and_variant_with_three_seeds():
    """configs/compare_registry.py (issue #50): every key of positional.REGISTRY and every variant of the config, each
    at three seeds, at the CPU headline's recipe; seed by seed, so an interrupted comparison reports whole seeds."""
    import positional
    from configs import compare_registry
    settings, train_keys, cfg = compare.parse(["configs/compare_registry.py"])
    runs = compare.plan(settings, train_keys)
    names = set(positional.REGISTRY) | set(compare_registry.variants)
    for name in names:
        assert sorted(r["seed"] for r in runs if r["encoding"] == name) == [1337, 1338, 1339], name
    seeds = [r["seed"] for r in runs]
    assert seeds == sorted(seeds) and cfg.block_size == 256 and settings["retrieval_probe"]
