"""End to end: train.py on a task, then evaluate.py (a task checkpoint) and compare.py's task suite
write their reports."""
import json
import os

import pytest

import compare
import evaluate
import tasks
from tasks.common import check_length
from tasks.score import accuracy, load_task_model
from tests.inproc import one_line_error, run_train

COPY = ["configs/tasks/copy.py", "--block_size=12", "--n_layer=2", "--n_head=2", "--n_embd=32", "--batch_size=32",
        "--max_iters=300", "--lr_decay_iters=300", "--warmup_iters=20", "--learning_rate=5e-3", "--min_lr=1e-3",
        "--eval_interval=100", "--eval_iters=2", "--log_interval=100", "--device=cpu", "--pos_encoding=rope"]

pytestmark = pytest.mark.slow   # a 300-step training run shared by the module, compare.py's task suite


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("copy")
    assert run_train([*COPY, f"--out_dir={out}"]) == 0
    return out


def test_trained_copy_beats_chance_and_reports(copy_run, capsys):
    model, name, train_len = load_task_model(str(copy_run))
    assert (name, train_len) == ("copy", 12)
    exact, token = accuracy(model, tasks.copy, 12, samples=100)
    # chance: 1/16 per token, 16^-5 for the whole 5-symbol answer
    assert token > 0.5 and exact > 0.2, (exact, token)
    report = copy_run / "report"
    evaluate.main([str(copy_run), "--lengths=12,24", "--samples=20", f"--report_dir={report}"])
    for f in ("task_scores.md", "task_scores.csv", "task_scores.json", "task_scores.png"):
        assert (report / f).stat().st_size > 0
    got = json.loads((report / "task_scores.json").read_text())
    assert [r["length"] for r in got["runs"][str(copy_run)]["rows"]] == [12, 24]
    assert "| 12 | 24 |" in (report / "task_scores.md").read_text()


def test_score_task_bad_input(copy_run, tiny_run, tmp_path, capsys):
    err = one_line_error(evaluate.main, [str(copy_run), "--lengths=3", f"--report_dir={tmp_path}"], capsys)
    assert "task copy needs a length >= 4" in err
    err = one_line_error(evaluate.main, [str(copy_run), "--pos_encoding=alibi"], capsys)
    assert "--pos_encoding would change the trained model" in err
    err = one_line_error(evaluate.main, [str(copy_run), str(tiny_run)], capsys)
    assert "give task checkpoints (train.py --task=...) or dataset checkpoints, not both" in err
    err = one_line_error(evaluate.main, [str(copy_run), "--windw=4"], capsys)
    assert "did you mean 'window'" in err
    with pytest.raises(ValueError):
        check_length("copy", 4, 2.5)


def test_compare_tasks_reports_and_restarts(tmp_path, capsys):
    args = ["configs/tasks/base.py", "--suite=tasks", "--tasks=parity", "--encodings=none,alibi", "--seeds=1",
            "--jobs=2", "--samples=8", "--multiples=1,2", "--max_iters=4", "--eval_interval=2", "--eval_iters=1",
            "--n_layer=1", "--n_embd=16", "--n_head=2", "--block_size=8", "--batch_size=4", "--device=cpu",
            f"--out_root={tmp_path}"]
    compare.main(args)
    report = (tmp_path / "report" / "report.md").read_text()
    assert "| encoding | MRR | parity |" in report and "| 8 | 16 |" in report
    for f in ("parity.png", "heatmap.png", "runs.csv"):
        assert (tmp_path / "report" / f).stat().st_size > 0
    log = tmp_path / "parity" / "alibi-s1337" / "train.out"
    first = log.read_text()
    compare.main(args)                          # restart: nothing trained or scored again
    assert log.read_text() == first
    err = one_line_error(compare.main, [*args, "--n_layer=2"], capsys)
    assert "was trained with n_layer=1" in err
    err = one_line_error(compare.main, [*args[:-1], "--tasks=passkey", f"--out_root={tmp_path / 'x'}"], capsys)
    assert "task passkey cannot fill block_size=8" in err
    assert not os.path.exists(tmp_path / "x")


def test_sample_reads_a_task_checkpoint(copy_run, capsys):
    """The checkpoint carries the task's char vocabulary: PAD '.', SEP '|', symbols '0'.. ."""
    import sample
    sample.main([f"--out_dir={copy_run}", "--start=.0123|", "--max_new_tokens=4", "--top_k=1", "--device=cpu"])
    out = capsys.readouterr().out
    assert ".0123|" in out and all(c in tasks.common.CHARS for c in out.split(".0123|")[1][:4])


def test_a_randomized_run_is_evaluated_on_sampled_positions(tmp_path, monkeypatch):
    """Trained with position_sampling=randomized, a model is evaluated on sampled positions too, as Ruoss et al.'s
    are (0..n-1 is out of its distribution: the suite's copy runs had training loss 0.16 there and 1.68 on 0..n-1):
    every loss of the run, training steps and estimate_loss alike, reads positions drawn from [0, max_position), and
    so does each scored answer."""
    import train
    from tasks import score
    fed, real_loss = [], train.forward_loss
    monkeypatch.setattr(train, "forward_loss",
                        lambda model, x, y, pos, *more: fed.append(pos) or real_loss(model, x, y, pos, *more))
    out = tmp_path / "rand"
    args = [*COPY, "--pos_encoding=learned", "--position_sampling=randomized", "--max_position=48", "--max_iters=20",
            "--lr_decay_iters=20", "--eval_interval=10", f"--out_dir={out}"]
    assert run_train(args) == 0
    assert len(fed) > 20 and all(p is not None and int(p.max()) < 48 for p in fed)   # 20 steps and 3 evaluations
    seen, real = [], score.greedy
    monkeypatch.setattr(score, "greedy",
                        lambda m, ids, mask, pos=None, *more: seen.append(pos) or real(m, ids, mask, pos, *more))
    score.score_checkpoints([str(out)], lengths=[12, 48], samples=8)
    assert seen and all(p is not None and int(p.max()) < 48 for p in seen) and {len(p) for p in seen} == {12, 48}
