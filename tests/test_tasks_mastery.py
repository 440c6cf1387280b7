"""Tasks learned before they are scored: the mastery filter and the tie-averaged MRR in compare.py's
task report, and PI's Table 4 in miniature (the passkey effective window against fine-tuning steps)
end to end at tiny size."""
import csv
import json
import shutil

import pytest
import torch

import compare
from comparison import finetune
from measure import kept
from tasks import report
from tasks.score import effective_window
from training import checkpoint


def fake(task, enc, seed, at_l, past):
    rows = [dict(length=8, exact=at_l, token=at_l, samples=10), dict(length=16, exact=past, token=past, samples=10)]
    return dict(task=task, encoding=enc, seed=seed, rows=rows, train_s=1.0, score_s=0.5)


@pytest.mark.slow
def test_runs_below_mastery_are_counted_and_left_out_of_the_ranking(tmp_path):
    results = [fake("copy", "a", 1, 1.0, 0.5), fake("copy", "a", 2, 0.94, 0.9),   # seed 2 not learned: its 0.9 unused
               fake("copy", "b", 1, 0.95, 0.4), fake("copy", "b", 2, 1.0, 0.6),   # 95% counts; ties a at 0.5
               fake("copy", "c", 1, 0.2, 0.0), fake("copy", "c", 2, 0.5, 0.0),    # not learned: no rank
               fake("parity", "a", 1, 1.0, 0.2), fake("parity", "a", 2, 1.0, 0.4),
               fake("parity", "b", 1, 1.0, 0.1), fake("parity", "b", 2, 1.0, 0.1),
               fake("parity", "c", 1, 1.0, 0.6), fake("parity", "c", 2, 1.0, 0.6)]
    settings = dict(report_dir=str(tmp_path), lengths=[8, 16], seed_list=[1, 2], samples=10, jobs=1, threads=1)
    md = open(report.write_comparison(results, [], settings, 8, 60.0, "python compare.py x")).read()
    assert "(3/12 of all runs not learned)" in md
    assert "| a | 1/2 | 0/2 | 1/4 |" in md and "| b | 0/2 | 0/2 | 0/4 |" in md and "| c | 2/2 | 0/2 | 2/4 |" in md
    # c did not learn copy: the MRR ranks over parity alone, the task every ranked encoding learned: c 1, a 1/2,
    # b 1/3 (copy's cells still shown: a and b tie there at 50%)
    ranking = md.split("## Ranking")[1]
    assert ": parity (1 of 2)." in ranking
    lines = ["| c | 1.00 | not learned | 60.0 |",
             "| a | 0.50 | 50.0 (1/2 seeds) | 30.0 |",
             "| b | 0.33 | 50.0 | 10.0 |"]
    assert [ranking.index(line) for line in lines] == sorted(ranking.index(line) for line in lines)
    with open(tmp_path / "runs.csv") as f:
        learned = {(r["task"], r["encoding"], r["seed"]): r["learned"] for r in csv.DictReader(f)}
    assert learned[("copy", "a", "2")] == "False" and learned[("copy", "b", "1")] == "True"
    assert "## Effective context window" not in md   # no fine-tune, no Table 4


TINY = ["configs/tasks/passkey_pi.py", "--block_size=12", "--n_layer=1", "--n_head=2", "--n_embd=16", "--batch_size=8",
        "--max_iters=3", "--lr_decay_iters=3", "--warmup_iters=1", "--eval_interval=3", "--eval_iters=1",
        "--device=cpu", "--seeds=1", "--jobs=1", "--threads=1", "--samples=4", "--multiples=1,1.5,2",
        "--finetune_factor=2", "--finetune_steps=1,2", "--rope_scalings=linear"]


@pytest.mark.slow
def test_pi_table4_in_miniature(tmp_path, monkeypatch):
    args = [*TINY, f"--out_root={tmp_path}", f"--report_dir={tmp_path / 'report'}"]
    monkeypatch.setattr(report, "MASTERY", 0.0)   # 3 iterations learn nothing; count every run as learned
    compare.main(args)
    run = tmp_path / "passkey" / "rope-s1337"
    with open(tmp_path / "report" / "finetune_windows.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["method"], int(r["steps"])) for r in rows] == [(m, k) for m in ("direct", "linear") for k in (0, 1, 2)]
    for r in rows:   # each window is PI's rule on the grid scored for that model
        k, m = int(r["steps"]), r["method"]
        path = run / f"task_scores-{m}.json" if k == 0 and m != "direct" else (
            run / "task_scores.json" if k == 0
            else tmp_path / "passkey" / f"rope-s1337-ft-{m}-{k}" / "task_scores.json")
        got = json.loads(path.read_text())
        assert int(r["effective_window"]) == effective_window(got["value"]["grid"])
        assert got["settings"]["lengths"] == [12, 18, 24]
    assert json.loads((run / "task_scores-linear.json").read_text())["settings"]["overrides"] == {
        "rope_scaling": "linear", "rope_factor": 2.0}
    for m, scaling in (("direct", ""), ("linear", "linear")):
        for k in (1, 2):
            ckpt = checkpoint.load(str(tmp_path / "passkey" / f"rope-s1337-ft-{m}-{k}"))
            assert (ckpt["iter_num"], ckpt["model_args"]["block_size"], ckpt["model_args"]["rope_scaling"]) == (
                3 + k, 24, scaling)
    md = (tmp_path / "report" / "report.md").read_text()
    table = md.split("## Effective context window against fine-tuning steps")[1]
    assert "| method | 0 | 1 | 2 |" in table and "1 of 1 seeds" in table
    cells = {(r["method"], r["steps"]): r["effective_window"] for r in rows}
    assert "| rope+linear | " + " | ".join(cells["linear", k] for k in "012") + " |" in table
    assert (tmp_path / "report" / "finetune_windows.png").stat().st_size > 0

    # the stages are one fine-tune seen at its steps: 1 + 1 steps resumed == 2 steps straight
    settings, train_keys, cfg = compare.parse(args)
    straight = tmp_path / "passkey" / "straight"
    shutil.copytree(run, straight)
    plan = compare.plan(settings, train_keys)[0]
    out = finetune.finetune(dict(plan, dir=str(straight)), 3, "linear", 2, dict(settings, finetune_steps=[2]),
                            train_keys, cfg)
    a, b = checkpoint.load(out)["model"], checkpoint.load(str(tmp_path / "passkey" / "rope-s1337-ft-linear-2"))["model"]
    assert all(torch.equal(a[key], b[key]) for key in a)

    # restart with the 95% filter: nothing trained again; the untrained run is left out of Table 4
    monkeypatch.setattr(report, "MASTERY", 0.95)
    logs = [run / "train.out", tmp_path / "passkey" / "rope-s1337-ft-linear-2" / "train.out"]
    trained = [log.read_text() for log in logs]
    compare.main(args)
    assert [log.read_text() for log in logs] == trained
    table = (tmp_path / "report" / "report.md").read_text().split("## Effective context window")[1]
    assert "0 of 1 seeds" in table and "| rope+linear | — | — | — |" in table


@pytest.mark.parametrize("bad, says", [(["--tasks=copy"], "needs --tasks=passkey"),
                                       (["--finetune_steps=2,1"], "increasing steps"),
                                       (["--multiples=2,4"], "multiples must hold 1")])
def test_bad_table4_settings_one_line(bad, says, tmp_path, capsys):
    from tests.inproc import one_line_error
    err = one_line_error(compare.main, [*TINY, *bad, f"--out_root={tmp_path / 'x'}"], capsys)
    assert says in err and not (tmp_path / "x").exists()


def test_table4_cells_by_hand(tmp_path):
    """Windows as mean ± sd over the learned seeds; a seed whose pretraining was not learned is left out."""
    def run(seed, at_l, windows):
        return dict(fake("passkey", "rope", seed, at_l, 0.0), windows=[
            dict(method=m, steps=k, effective_window=w) for (m, k), w in windows.items()])
    results = [run(1, 1.0, {("direct", 0): 8, ("direct", 25): 8, ("linear", 0): 8, ("linear", 25): 32}),
               run(2, 0.96, {("direct", 0): 8, ("direct", 25): 16, ("linear", 0): 16, ("linear", 25): 32}),
               run(3, 0.5, {("direct", 0): 0, ("direct", 25): 0, ("linear", 0): 0, ("linear", 25): 0})]
    md = "\n".join(report.windows(results, str(tmp_path), 8, 32, [8, 16, 32]))
    assert "2 of 3 seeds" in md and "| method | 0 | 25 |" in md
    assert "| rope+direct | 8 ± 0 | 12 ± 6 |" in md      # 12 ± 6: 8 and 16 (sd 5.66)
    assert "| rope+linear | 12 ± 6 | 32 ± 0 |" in md
    with open(tmp_path / "finetune_windows.csv") as f:
        assert sum(r["learned"] == "False" for r in csv.DictReader(f)) == 4
    assert (tmp_path / "finetune_windows.png").stat().st_size > 0


SUITE = ["configs/tasks/compare.py", "--block_size=12", "--n_layer=1", "--n_head=2", "--n_embd=16", "--batch_size=8",
         "--max_iters=2", "--lr_decay_iters=2", "--warmup_iters=1", "--eval_interval=2", "--eval_iters=1",
         "--device=cpu", "--seeds=1", "--jobs=1", "--threads=1", "--samples=2", "--multiples=1,2",
         "--encodings=rope", "--tasks=copy,parity"]


@pytest.mark.slow
def test_a_task_trains_on_its_own_recipe(tmp_path):
    """task_recipes: copy trains with its recipe's keys (4 iterations at its learning rate), parity on the config's
    (2); the report names the recipe; a second call trains nothing again."""
    recipes = "--task_recipes={'copy': {'max_iters': 4, 'lr_decay_iters': 4, 'learning_rate': 5e-4}}"
    args = [*SUITE, recipes, f"--out_root={tmp_path}", f"--report_dir={tmp_path / 'report'}"]
    compare.main(args)
    copy_run, parity_run = (checkpoint.load(str(tmp_path / t / "rope-s1337")) for t in ("copy", "parity"))
    assert (copy_run["iter_num"], copy_run["config"]["learning_rate"]) == (4, 5e-4)
    assert (parity_run["iter_num"], parity_run["config"]["learning_rate"]) == (2, 3e-3)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "own recipe (the rest on the config's): copy: max_iters=4, lr_decay_iters=4, learning_rate=0.0005." in md
    log = (tmp_path / "copy" / "rope-s1337" / "train.out").read_text()
    compare.main(args)
    assert (tmp_path / "copy" / "rope-s1337" / "train.out").read_text() == log


@pytest.mark.parametrize("bad, says", [("{'copy': {'seed': 3}}", "task_recipes['copy'] must be a dict"),
                                       ("{'sorting': {'max_iters': 3}}", "sorting"),
                                       ("{'copy': {'learning_rate': -1}}", "learning_rate")])
def test_bad_task_recipes_one_line(bad, says, tmp_path, capsys):
    from tests.inproc import one_line_error
    err = one_line_error(compare.main, [*SUITE, f"--task_recipes={bad}", f"--out_root={tmp_path / 'x'}"], capsys)
    assert says in err and not (tmp_path / "x").exists()


@pytest.mark.slow
def test_a_kept_task_run_is_not_run_again_anywhere(tmp_path):
    """A task run's scores are kept in the report folder: with the run folders gone (another machine), the same
    report comes back and nothing is trained; --kept_only=True reports what is kept."""
    args = [*SUITE, "--tasks=copy", f"--out_root={tmp_path / 'out'}", f"--report_dir={tmp_path / 'report'}"]
    compare.main(args)
    first = (tmp_path / "report" / "runs.csv").read_text()
    assert kept.read(tmp_path / "report" / "runs" / "copy-rope-s1337")["value"]
    shutil.rmtree(tmp_path / "out")
    compare.main(args)
    assert not (tmp_path / "out" / "copy" / "rope-s1337" / "train.out").exists()   # nothing trained
    assert (tmp_path / "report" / "runs.csv").read_text() == first
    compare.main([*args, "--kept_only=True", "--seeds=2"])   # seed 1338 not kept: left out, not trained
    assert (tmp_path / "report" / "runs.csv").read_text() == first
    assert not (tmp_path / "out" / "copy" / "rope-s1338").exists()


@pytest.mark.slow
def test_a_variant_is_reported_under_its_own_name(tmp_path):
    """configs/tasks/compare.py's rope_randomized trains a rope model on sampled positions: the report and runs.csv
    keep it apart from rope (its label), also when it comes back kept."""
    args = [*SUITE, "--tasks=copy", "--encodings=rope,rope_randomized", f"--out_root={tmp_path / 'out'}",
            f"--report_dir={tmp_path / 'report'}"]
    for _ in range(2):   # trained and scored, then kept
        compare.main(args)
        with open(tmp_path / "report" / "runs.csv") as f:
            assert {r["encoding"] for r in csv.DictReader(f)} == {"rope", "rope_randomized"}


@pytest.mark.slow
def test_a_recipe_trial_trains_scores_and_appends_its_row(tmp_path, monkeypatch):
    """python -m tasks.trial: its row holds the keys it trained with (model keys under `other`) and the exact
    match at L of the checkpoint it trained, scored again here."""
    import tasks.score
    from tasks import trial
    scored, real = [], tasks.score.accuracy
    monkeypatch.setattr(tasks.score, "accuracy", lambda model, task, n, samples, positions: scored.append(
        (model.config.n_layer, model.config.n_embd, n, samples, real(model, task, n, samples, positions=positions),
         positions)) or scored[-1][-2])
    trials = tmp_path / "trials.csv"
    args = ["copy", "rope", "--max_iters=6", "--block_size=12", "--n_layer=1", "--n_embd=16", "--n_head=2",
            "--batch_size=4", "--eval_interval=6", "--eval_iters=1", "--samples=8", f"--trials={trials}"]
    monkeypatch.chdir(compare.ROOT)
    assert trial.main(args) == 0 and trial.main([*args[:2], "--max_iters=2", *args[3:]]) == 0
    rows = list(csv.DictReader(open(trials)))
    assert [(r["task"], r["encoding"], r["max_iters"], r["warmup_iters"], r["samples"]) for r in rows] == [
        ("copy", "rope", "6", "100", "8"), ("copy", "rope", "2", "100", "8")]
    assert rows[0]["other"] == "block_size=12 n_layer=1 n_embd=16 n_head=2 batch_size=4 eval_interval=6 eval_iters=1"
    assert [s[:4] for s in scored] == [(1, 16, 12, 8)] * 2       # the model trained with the keys, scored at L
    assert [float(r["exact_at_L"]) for r in rows] == [s[-2][0] for s in scored] and scored[0][-1] is None
    assert trial.main([*args, "--position_sampling=randomized", "--max_position=48"]) == 0   # scored as trained:
    assert scored[-1][-1] is not None and scored[-1][-1](12, 0).max() < 48                 # on sampled positions


@pytest.mark.slow
def test_a_recipe_trial_stopped_by_its_time_limit_scores_its_saved_checkpoint(tmp_path, monkeypatch):
    """--time_limit: train.py is stopped by SIGTERM (it saves that step), the checkpoint is scored, and the row
    names the iteration it stopped at; a limit too short for any checkpoint writes no row and exits 1."""
    from tasks import trial
    trials = tmp_path / "trials.csv"
    args = ["copy", "rope", "--max_iters=1000000", "--block_size=12", "--n_layer=1", "--n_embd=16", "--n_head=2",
            "--batch_size=4", "--eval_interval=1000000", "--eval_iters=1", "--samples=8", f"--trials={trials}"]
    monkeypatch.chdir(compare.ROOT)
    assert trial.main([*args, "--time_limit=40"]) == 0
    [row] = list(csv.DictReader(open(trials)))
    stopped = dict(kv.split("=") for kv in row["other"].split())["stopped_at"]
    assert row["max_iters"] == "1000000" and 0 < int(stopped) < 1000000 and 0 <= float(row["exact_at_L"]) <= 1
    assert trial.main([*args, "--time_limit=0.01"]) == 1 and len(list(csv.DictReader(open(trials)))) == 1


# ---- training to mastery (--stop_at_mastery, training/mastery.py) and near-bar rescoring ----------------------
COPY = ["configs/tasks/copy.py", "--block_size=8", "--n_layer=1", "--n_head=2", "--n_embd=16", "--batch_size=4",
        "--max_iters=8", "--lr_decay_iters=8", "--warmup_iters=1", "--eval_interval=2", "--eval_iters=1",
        "--log_interval=100", "--device=cpu"]


def scripted_checks(monkeypatch, scores):
    """tasks.score.accuracy replaced by the given exact matches, one per call; -> the calls (task, length,
    samples, generated seed 0's ids)."""
    import tasks.score
    calls, left = [], list(scores)

    def accuracy(model, task, n, samples=200, positions=None):
        calls.append((task.generate(tasks.score.SEED_BASE, n).ids, n, samples, model.training))
        return left.pop(0), 1.0
    monkeypatch.setattr(tasks.score, "accuracy", accuracy)
    return calls


def test_a_task_run_stops_at_the_first_evaluation_at_the_bar_and_a_resume_trains_no_further(tmp_path, monkeypatch,
                                                                                             capsys):
    import tasks
    import tasks.score
    from training.mastery import HELD_OUT
    from tests.inproc import on_training_forward, run_train, snapshot
    argv = [*COPY, f"--out_dir={tmp_path}", "--stop_at_mastery=0.95", "--mastery_samples=7"]
    calls = scripted_checks(monkeypatch, [0.5, 0.95, 0.99])
    losses = on_training_forward(monkeypatch)
    assert run_train(argv) == 0
    ckpt = checkpoint.load(tmp_path)
    assert ckpt["iter_num"] == 4 and len(losses) == 4   # checked at 2 (50%) and 4 (95%: at the bar), of 8
    assert ckpt["mastery"] == dict(reached=4, exact=0.95, checked_at=4, bar=0.95, samples=7)
    # scored at L on 7 held-out examples, in eval mode: seeds of their own, not the final score's
    assert [c[1:] for c in calls] == [(8, 7, False)] * 2
    assert calls[0][0] == tasks.copy.generate(HELD_OUT, 8).ids != tasks.copy.generate(tasks.score.SEED_BASE, 8).ids
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [(r["iter"], r["reached"]) for r in log if r["event"] == "mastery"] == [(2, False), (4, True)]
    assert "step 4: exact match at L=8 on 7 held-out examples 95.0% (bar 95%): reached, training stops" in (
        capsys.readouterr().out)
    before = snapshot(checkpoint.path_in(tmp_path))
    assert run_train([*argv, "--init_from=resume"]) == 0   # the bar was reached: nothing to train
    assert "reached stop_at_mastery=0.95 at iteration 4: nothing to train" in capsys.readouterr().out
    assert snapshot(checkpoint.path_in(tmp_path)) == before and len(losses) == 4 and len(calls) == 2
    assert run_train([*argv, "--init_from=resume", "--stop_at_mastery=0.99"]) == 0   # a higher bar trains on
    ckpt = checkpoint.load(tmp_path)
    assert (ckpt["iter_num"], ckpt["mastery"]["reached"], len(losses)) == (6, 6, 6)


def test_a_run_that_never_reaches_the_bar_trains_to_its_cap(tmp_path, monkeypatch):
    from tests.inproc import run_train
    calls = scripted_checks(monkeypatch, [0.2, 0.5, 0.9, 0.94])
    assert run_train([*COPY, f"--out_dir={tmp_path}", "--stop_at_mastery=0.95"]) == 0
    ckpt = checkpoint.load(tmp_path)
    assert ckpt["iter_num"] == 8 and len(calls) == 4      # every evaluation checked, the cap's too
    assert ckpt["mastery"] == dict(reached=None, exact=0.94, checked_at=8, bar=0.95, samples=200)


@pytest.mark.parametrize("bad, says", [
    (["--stop_at_mastery=1.01"], "stop_at_mastery needs a task and a bar in (0, 1]"),
    (["--stop_at_mastery=-0.5"], "stop_at_mastery needs a task"),
    (["--stop_at_mastery=0.9", "--mastery_samples=0"], "mastery_samples must be >= 1"),
    (["--mastery_samples=50"], "mastery_samples=50 applies to stop_at_mastery only")])
def test_bad_mastery_settings_one_line(bad, says, tmp_path, capsys):
    from tests.inproc import train_error
    assert says in train_error([*COPY, *bad, f"--out_dir={tmp_path}"], capsys)


def test_stop_at_mastery_needs_a_task_one_line(tiny_data, tmp_path, capsys):
    from tests.conftest import TINY_ARGS
    from tests.inproc import train_error
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--stop_at_mastery=0.95"],
                      capsys)
    assert "stop_at_mastery needs a task" in err and "task=''" in err


@pytest.mark.slow
def test_a_tiny_model_learns_copy_to_a_low_bar_and_stops_before_its_cap(tmp_path):
    """No stub: a 1-layer model on copy at L = 8 (3 answer tokens of 16 symbols, chance 0.02%) passes 20% exact
    match on held-out examples within its 400 iterations (31% at iteration 200 in the run that set the bar) and
    stops at that evaluation; scored again by the final scorer it is well above chance."""
    import tasks
    from tasks import score
    from tests.inproc import run_train
    argv = [*COPY, "--n_embd=32", "--batch_size=32", "--max_iters=400", "--lr_decay_iters=400", "--warmup_iters=10",
            "--eval_interval=25", f"--out_dir={tmp_path}", "--stop_at_mastery=0.2", "--mastery_samples=100"]
    assert run_train(argv) == 0
    ckpt = checkpoint.load(tmp_path)
    reached = ckpt["mastery"]["reached"]
    assert reached is not None and reached == ckpt["iter_num"] < 400 and reached % 25 == 0
    assert ckpt["mastery"]["exact"] >= 0.2
    model, name, n = score.load_task_model(str(tmp_path), ckpt=ckpt)
    assert score.accuracy(model, tasks.get(name), n, 100)[0] > 0.05


def test_near_bar_rescoring_uses_500_samples_and_only_near_the_bar(tmp_path, monkeypatch):
    """A score at L less than 5 points from the 95% bar (90% < exact < 100%) is scored again at L on 500 examples,
    whose row replaces it (and decides learned); 100%, 90% and 80% are left as they are; cached per checkpoint."""
    from comparison import task_suite
    from tests.inproc import run_train
    assert run_train([*COPY, "--max_iters=2", f"--out_dir={tmp_path}"]) == 0
    calls = scripted_checks(monkeypatch, [0.96, 0.93])

    def scored(at_l):
        return {"rows": [dict(length=8, exact=at_l, token=at_l, samples=200), dict(length=16, exact=0.1, token=0.5,
                                                                                   samples=200)]}
    for far in (1.0, 0.9, 0.8, None):
        assert task_suite.near_bar(str(tmp_path), scored(far)) == scored(far)
    assert calls == []
    got = task_suite.near_bar(str(tmp_path), scored(0.94))
    assert [c[1:3] for c in calls] == [(8, 500)]                 # at L, 500 samples
    assert got["rows"][0]["samples"] == 500 and got["rows"][0]["exact"] == 0.96
    assert got["rows"][1] == scored(0.9)["rows"][1]
    assert report.learned(got["rows"], 8) and not report.learned(scored(0.94)["rows"], 8)
    assert task_suite.near_bar(str(tmp_path), scored(0.91)) == got and len(calls) == 1   # cached: not scored again
    assert got["rows"][0]["samples"] >= report.NEAR_SAMPLES >= 500
    # a kept result is completed the same way where its checkpoint is here, and left as it is where it is not
    OFF = dict(task_distance=False)
    assert task_suite.complete(dict(dir=str(tmp_path)), scored(0.94), dict(task_distance=False), None) == (got, True)
    assert task_suite.complete(dict(dir=str(tmp_path)), scored(1.0), OFF, None) == (scored(1.0), False)
    assert task_suite.complete(dict(dir=str(tmp_path / "elsewhere")), scored(0.94), OFF, None) == (scored(0.94), False)


def mastered(task, enc, seed, at_l, past, reached, cap=800, samples=10):
    out = fake(task, enc, seed, at_l, past)
    out["rows"][0]["samples"] = samples
    return dict(out, mastery=dict(reached=reached, cap=cap, bar=0.95, samples=200))


@pytest.mark.slow
def test_iterations_to_mastery_come_before_the_scores_past_l_and_the_mrr_ranks_over_common_tasks(tmp_path):
    """By hand: copy learned by a, b, c; parity by a and b only (c: not learned by the cap); d has no score past L
    on any task (a position table: n/a), so it is not ranked. The MRR ranks over copy alone: a 0.8 (1), c 0.6 (1/2),
    b 0.4 (1/3); over each encoding's own tasks b would have had (1/3 + 1) / 2 and a (1 + 1/2) / 2."""
    results = [mastered("copy", "a", 1, 1.0, 0.8, 200), mastered("copy", "a", 2, 1.0, 0.8, 400),
               mastered("copy", "b", 1, 0.97, 0.4, 600, samples=500), mastered("copy", "c", 1, 1.0, 0.6, 250),
               mastered("parity", "a", 1, 1.0, 0.2, 100), mastered("parity", "a", 2, 0.5, 0.0, None),
               mastered("parity", "b", 1, 1.0, 0.9, 300), mastered("parity", "c", 1, 0.3, 0.0, None, cap=900),
               mastered("copy", "d", 1, 1.0, None, 50), mastered("parity", "d", 1, 1.0, None, 50)]
    settings = dict(report_dir=str(tmp_path), lengths=[8, 16], seed_list=[1, 2], samples=10, jobs=1, threads=1)
    md = open(report.write_comparison(results, [], settings, 8, 60.0, "python compare.py x")).read()
    its = md.split("## Iterations to mastery")[1].split("##")[0]
    assert "bar 95% on 200 examples" in its
    assert "| a | 300 ± 141 | 100; not learned by 800 (1/2 seeds) |" in its
    assert "| b | 600 | 300 |" in its and "| c | 250 | not learned by 900 (1/1 seeds) |" in its
    assert (md.index("## Iterations to mastery") < md.index("## Learned at") < md.index("## Ranking")
            < md.index("## copy"))
    with open(tmp_path / "runs.csv") as f:
        at = {(r["task"], r["encoding"], r["seed"], r["length"]): r["mastered_at"] for r in csv.DictReader(f)}
    assert at[("copy", "a", "2", "16")] == "400" and at[("parity", "c", "1", "8")] == ""
    assert "1 run(s) scored within 5 points of the bar at L were scored there again on 500 examples" in md
    ranking = md.split("## Ranking")[1].split("## copy")[0]
    assert "every ranked encoding learned" in ranking and ": copy (1 of 2)." in ranking
    lines = ["| a | 1.00 | 80.0 | 20.0 (1/2 seeds) |",
             "| c | 0.50 | 60.0 | not learned |",
             "| b | 0.33 | 40.0 | 90.0 |",
             "| d | — | n/a | n/a |"]
    assert [ranking.index(line) for line in lines] == sorted(ranking.index(line) for line in lines)
    common, ranks = report.mrr({"copy": {"a": 0.8, "b": 0.4, "c": 0.6, "d": None},
                                "parity": {"a": 0.2, "b": 0.9, "c": None, "d": None}})
    assert common == ["copy"] and ranks == {"a": 1.0, "c": 0.5, "b": pytest.approx(1 / 3), "d": None}
    assert report.mrr({"copy": {"a": 0.5, "b": None}, "parity": {"a": None, "b": 0.5}}) == ([], {"a": None, "b": None})


@pytest.mark.slow
def test_the_mastery_config_trains_each_run_to_the_bar_or_its_cap_and_reports_the_iterations(tmp_path):
    """configs/tasks/mastery.py at tiny size: 2 iterations do not reach 95% at L, so the run trains to its cap and
    the report says "not learned by 2" before any score past L; its record is kept, and a second call trains
    nothing again."""
    args = ["configs/tasks/mastery.py", *SUITE[1:], "--tasks=copy", "--task_recipes={}", f"--out_root={tmp_path}",
            f"--report_dir={tmp_path / 'report'}"]
    compare.main(args)
    ckpt = checkpoint.load(str(tmp_path / "copy" / "rope-s1337"))
    assert ckpt["config"]["stop_at_mastery"] == 0.95 and ckpt["iter_num"] == 2
    assert ckpt["mastery"]["reached"] is None and ckpt["mastery"]["checked_at"] == 2
    md = (tmp_path / "report" / "report.md").read_text()
    assert "| rope | not learned by 2 (1/1 seeds) |" in md.split("## Iterations to mastery")[1]
    assert md.index("## Iterations to mastery") < md.index("## Ranking")
    got = kept.read(tmp_path / "report" / "runs" / "copy-rope-s1337")["value"]
    assert got["mastery"] == dict(reached=None, cap=2, bar=0.95, samples=200)
    log = (tmp_path / "copy" / "rope-s1337" / "train.out").read_text()
    compare.main(args)
    assert (tmp_path / "copy" / "rope-s1337" / "train.out").read_text() == log


def test_checking_for_mastery_keeps_resume_exact(tmp_path, monkeypatch):
    """The checks come before the save of their evaluation and leave the model in training mode (dropout on): 4
    iterations, then a resume to 8, give the losses and weights of 8 straight, the bar checked at every evaluation."""
    import torch
    from tests.inproc import on_training_forward, run_train
    losses = on_training_forward(monkeypatch)   # the real checks (8 iterations learn nothing: never at the bar)
    argv = [*COPY, "--stop_at_mastery=0.95", "--mastery_samples=16", "--dropout=0.1"]
    assert run_train([*argv, f"--out_dir={tmp_path / 'straight'}"]) == 0
    straight, losses[:] = list(losses), []
    assert run_train([*argv, f"--out_dir={tmp_path / 'split'}", "--max_iters=4"]) == 0
    assert run_train([*argv, f"--out_dir={tmp_path / 'split'}", "--init_from=resume"]) == 0
    assert losses == straight and len(straight) == 8
    a, b = (checkpoint.load(str(tmp_path / d)) for d in ("straight", "split"))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"]) and a["mastery"] == b["mastery"]
    assert a["mastery"]["checked_at"] == 8 and a["mastery"]["reached"] is None


@pytest.mark.slow
def test_ddp_ranks_stop_together_at_the_bar(tmp_path):
    """torchrun with 2 processes: rank 0 scores, the ranks agree on its score, and all stop at that evaluation
    without a hang (a 5% bar, passed at iteration 125 of 400 in the run that set it)."""
    import os
    import subprocess
    import sys
    from tests.conftest import ROOT
    argv = [*COPY, "--n_embd=32", "--batch_size=32", "--max_iters=400", "--lr_decay_iters=400", "--warmup_iters=10",
            "--eval_interval=25", f"--out_dir={tmp_path}", "--stop_at_mastery=0.05", "--mastery_samples=100"]
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "train.py", *argv], cwd=ROOT, text=True, capture_output=True, timeout=300,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-2000:]
    ckpt = checkpoint.load(tmp_path)
    assert ckpt["mastery"]["reached"] == ckpt["iter_num"] < 400 and ckpt["mastery"]["exact"] >= 0.05
    assert f"done: {ckpt['iter_num']} iterations" in done.stdout
