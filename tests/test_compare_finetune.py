"""compare.py's fine-tuning protocol end to end on tiny data: each rotary run fine-tuned
from a copy at s L, directly and with each frequency method, at each budget of finetune_iters
(one fine-tune observed at each), evaluated with its own scaling, reported next to the same
method without fine-tuning; restartable."""
import csv

import pytest
import torch

from tests.conftest import TINY_ARGS, run_py

pytestmark = pytest.mark.slow   # compare.py in subprocesses, minutes of training


def args(tiny_data, out_root, *extra):
    tiny = [a for a in TINY_ARGS if not a.startswith(("--max_iters", "--eval_interval"))]
    return ["compare.py", *tiny, f"--data_dir={tiny_data}", f"--out_root={out_root}", "--only=rope,alibi",
            "--max_iters=6", "--eval_interval=6", "--eval_lengths=[16,32]", "--eval_tokens=64", "--plots=False",
            "--rope_scalings=['linear','yarn']", "--finetune_factor=2", *extra]


def test_finetune_protocol_end_to_end(tiny_data, tmp_path):
    """Budgets 1 and 3 (6 pretraining iterations: 17% and 50% of its tokens): ft3 continues ft1's copy."""
    out = tmp_path / "cmp"
    env = {"OMP_NUM_THREADS": "1"}
    r = run_py(*args(tiny_data, out, "--finetune_iters=[3,1]"), env=env)
    for m in ("yarn", "direct"):
        assert f"ft1 {m}] fine-tuning at 32 to iter 7 (resuming from iter 6)" in r.stdout   # a copy of the run
        assert f"ft3 {m}] fine-tuning at 32 to iter 9 (resuming from iter 7)" in r.stdout
    for m, scaling in (("direct", ""), ("linear", "linear"), ("yarn", "yarn")):
        for budget in (1, 3):
            ckpt = torch.load(out / f"rope-s1337-ft-{m}-{budget}" / "ckpt.pt", weights_only=False)
            a = ckpt["model_args"]
            assert (ckpt["iter_num"], a["block_size"], a["rope_scaling"]) == (6 + budget, 32, scaling)
            if scaling:  # L stays the pretraining length, s the fine-tune factor
                assert (a["pos_settings"]["rope_original_max_position"], a["pos_settings"]["rope_factor"]) == (16, 2.0)
            assert ckpt["config"]["learning_rate"] == ckpt["config"]["min_lr"] and ckpt["config"]["batch_size"] == 4
    assert torch.load(out / "rope-s1337" / "ckpt.pt", weights_only=False)["iter_num"] == 6   # the original untouched
    assert not list(out.glob("alibi-s1337-ft-*"))
    with open(out / "report" / "eval.csv") as f:
        labels = list(dict.fromkeys(row["label"] for row in csv.DictReader(f)))
    assert labels == ["rope", "rope+direct ft1", "rope+direct ft3", "rope+linear", "rope+linear ft1", "rope+linear ft3",
                      "rope+yarn", "rope+yarn ft1", "rope+yarn ft3", "alibi", "3-gram", "4-gram", "5-gram"]
    report = (out / "report" / "report.md").read_text()
    assert "| rope+yarn ft3 " in report and "| rope+direct ft1 " in report   # (a † when worse than the 4-gram)
    with open(out / "report" / "eval.csv") as f:   # the 2L summary holds the same numbers as eval.csv
        ppl = {row["label"]: float(row["ppl"]) for row in csv.DictReader(f) if row["length"] == "32"}
    section = report.split("## Extension methods at the fine-tuning length")[1].split("\n## ")[0]
    # an iteration at 2L holds 4 x 32 = 128 tokens; pretraining 6 x 8 x 16 = 768: budgets 17% and 50%
    assert "| rope: method | ppl@32, no fine-tune | ft1 (17% of pretraining) | ft3 (50% of pretraining) |" in section
    assert f"| yarn | {ppl['rope+yarn']:.2f} | {ppl['rope+yarn ft1']:.2f} | {ppl['rope+yarn ft3']:.2f} |" in section
    assert (f"| none (direct fine-tune) | {ppl['rope']:.2f} | {ppl['rope+direct ft1']:.2f} | "
            f"{ppl['rope+direct ft3']:.2f} |") in section
    assert "| alibi" not in section
    # the effective-scale section: 8 pairs (head dim 32 / 2 = 16), L = 16, s = 2: linear reaches 31 / (2 x 15)
    scales = (out / "report" / "effective_scale.csv").read_text().splitlines()
    assert scales[0].startswith("method,factor,length,ratio,scale,kept,blended,interpolated,pairs,reach")
    assert "| linear | 2 | 0 / 0 / 8 of 8 | 1.000 | 2 (0.50) | 2 (1.03) |" in report

    r = run_py(*args(tiny_data, out, "--finetune_iters=[1,3]"), env=env)          # done: nothing trained again
    assert "fine-tuning" not in r.stdout and "kept in" in r.stdout
    r = run_py(*args(tiny_data, out, "--finetune_iters=[1,3,5]"), env=env)        # a new budget continues ft3
    assert "ft5 yarn] fine-tuning at 32 to iter 11 (resuming from iter 9)" in r.stdout
    assert "ft3 yarn] fine" not in r.stdout
    assert torch.load(out / "rope-s1337-ft-yarn-5" / "ckpt.pt", weights_only=False)["iter_num"] == 11
    r = run_py(*args(tiny_data, out, "--finetune_iters=[2,5]"), env=env)          # ft5 now follows ft2: made again
    assert "ft5 yarn] fine-tuning at 32 to iter 11 (resuming from iter 8)" in r.stdout


def test_context_use_in_the_report(tiny_data, tmp_path):
    """--context_use measures each run as trained and each label of context_labels (cached,
    so finished runs only add the measurement); the report shows the gains as mean ± std."""
    from training import checkpoint
    from measure import context_use
    out, env = tmp_path / "cmp", {"OMP_NUM_THREADS": "1"}
    base = args(tiny_data, out, "--finetune_iters=2", "--seeds=2", "--rope_scalings=['yarn']", "--context_tokens=64")
    run_py(*base, env=env)
    r = run_py(*base, "--context_use=True", "--context_labels=['rope+yarn','rope+yarn ft2']", env=env)
    assert "trained in" not in r.stdout and "fine-tuning" not in r.stdout   # only the new measurement ran
    with open(out / "report" / "context_gain.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(dict.fromkeys(row["label"] for row in rows)) == ["rope", "rope+yarn", "rope+yarn ft2", "alibi"]
    assert {row["seed"] for row in rows} == {"1337", "1338"}
    assert [int(row["context"]) for row in rows[:5]] == [16, 32, 64, 128, 256]
    assert all(float(row["gain"]) == 1.0 for row in rows if row["context"] == "16")
    # the cached numbers are context_use's own, for the model as the label says
    ckpt = checkpoint.load(str(out / "rope-s1338-ft-yarn-2"))
    tokens, _ = __import__("measure.evaluation", fromlist=['x']).validation_tokens(ckpt, str(tiny_data), "val")
    want = context_use.context_gain(checkpoint.build_model(ckpt, None, "cpu", strict=False), tokens, 16,
                                    scored_tokens=64)
    got = [row for row in rows if row["label"] == "rope+yarn ft2" and row["seed"] == "1338"]
    assert [float(g["ppl"]) for g in got] == pytest.approx([w["ppl"] for w in want], rel=1e-6)   # kept: 7 digits
    report = (out / "report" / "report.md").read_text()
    assert "## Context use" in report and "| rope+yarn ft2 | " in report and " ± " in report.split("## Context use")[1]
    assert (out / "report" / "per_position.png").exists()
    bad = run_py(*base, "--context_use=True", "--context_labels=['alibi+yarn']", env=env, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "context_labels" in bad.stderr
