"""Exact resume: stopping and resuming gives the losses of an uninterrupted run at every
step, bitwise on CPU, whether the stop was planned (max_iters) or a signal (SIGINT, SIGTERM)."""
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
import torch

from training import checkpoint
from tests.conftest import ROOT, TINY_ARGS
from tests.inproc import on_training_forward, run_train, train_error

pytestmark = pytest.mark.slow   # train.py and torchrun in subprocesses, signalled

# dropout and gradient accumulation exercise the RNG states and the micro-step loop;
# lr_decay_iters pins the schedule so that a 20-step run has the same lr as a 40-step one
COMMON = [*TINY_ARGS, "--dropout=0.1", "--gradient_accumulation_steps=2", "--lr_decay_iters=40", "--max_iters=40"]


@pytest.fixture(scope="module")
def straight(tiny_data, tmp_path_factory):
    """Losses of every micro step and the final weights of an uninterrupted 40-step run."""
    out = tmp_path_factory.mktemp("straight")
    with pytest.MonkeyPatch.context() as mp:
        losses = on_training_forward(mp)
        assert run_train([*COMMON, f"--data_dir={tiny_data}", f"--out_dir={out}"]) == 0
    assert len(losses) == 80
    return losses, checkpoint.load(out)["model"]


def assert_same_run(straight, losses, out):
    want_losses, want_weights = straight
    assert losses == want_losses  # exact float equality, step by step
    got = checkpoint.load(out)
    assert got["iter_num"] == 40
    for k, v in want_weights.items():
        assert torch.equal(got["model"][k], v), k


def test_stop_at_max_iters_then_resume_matches_every_step(straight, tiny_data, tmp_path, monkeypatch):
    argv = [*COMMON, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}"]
    losses = on_training_forward(monkeypatch)
    assert run_train([*argv, "--max_iters=20"]) == 0
    assert checkpoint.load(tmp_path)["iter_num"] == 20 and len(losses) == 40
    assert run_train([*argv, "--init_from=resume"]) == 0
    assert_same_run(straight, losses, tmp_path)


def test_sigint_mid_interval_saves_that_step_and_resumes_exactly(straight, tiny_data, tmp_path, monkeypatch, capsys):
    """Ctrl-C during step 13 (micro step 25 of 26): the run finishes that step, saves iter 13,
    prints how to resume and exits 130; the resumed run continues bit for bit."""
    def interrupt(n, loss, model):
        if n == 25:
            os.kill(os.getpid(), signal.SIGINT)
        return loss

    argv = [*COMMON, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}"]
    before = signal.getsignal(signal.SIGINT)   # Python's default, or SIG_IGN when started in the background
    losses = on_training_forward(monkeypatch, interrupt)
    assert run_train(argv) == 130
    out = capsys.readouterr().out
    assert f"stopped by SIGINT at iter 13: saved {checkpoint.path_in(tmp_path)}; resume with:" in out
    hint = out.split("resume with:")[1].strip().splitlines()[0]
    assert shlex.split(hint)[:2] == ["python", "train.py"] and hint.endswith("--init_from=resume")
    assert checkpoint.load(tmp_path)["iter_num"] == 13 and len(losses) == 26
    assert signal.getsignal(signal.SIGINT) is before  # handlers restored
    assert run_train(shlex.split(hint)[2:]) == 0  # the printed command, as printed
    assert_same_run(straight, losses, tmp_path)


def test_sigterm_from_outside_saves_and_exits_cleanly(tiny_data, tmp_path, capsys):
    """A real training process gets SIGTERM at a random moment; meanwhile a second trainer on
    the same out_dir is refused. The first saves the step it reached, exits 143, no traceback."""
    argv = [*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--max_iters=1000000",
            "--eval_interval=1000000", "--log_interval=1"]
    p = subprocess.Popen([sys.executable, "train.py", *argv], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        for line in p.stdout:  # wait until it trains
            if line.startswith("iter "):
                break
        err = train_error(argv, capsys)
        assert f"{tmp_path} is in use by another training process (pid {p.pid}); wait for it" in err
        time.sleep(torch.rand(()).item() * 0.3)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 143 and "Traceback" not in err, err
    stopped = re.search(r"stopped by SIGTERM at iter (\d+): saved (\S+); resume with:\n  (.*)", out)
    assert stopped and stopped[2] == checkpoint.path_in(tmp_path), out[-2000:]
    assert checkpoint.load(tmp_path)["iter_num"] == int(stopped[1]) >= 1
    assert "--init_from=resume" in stopped[3]
    # the lock died with the process: the resume command works right away
    assert run_train([*shlex.split(stopped[3])[2:], f"--max_iters={int(stopped[1]) + 2}"]) == 0
    assert checkpoint.load(tmp_path)["iter_num"] == int(stopped[1]) + 2


def test_second_ctrl_c_stops_at_once_and_keeps_the_last_save(tiny_data, tmp_path, monkeypatch, capsys):
    def interrupt_twice(n, loss, model):
        if n in (25, 26):  # both micro steps of step 13
            os.kill(os.getpid(), signal.SIGINT)
        return loss

    on_training_forward(monkeypatch, interrupt_twice)
    before = signal.getsignal(signal.SIGINT)
    argv = [*COMMON, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}"]
    err = train_error(argv, capsys, code=130)
    assert "stopped at once by a second Ctrl-C" in err
    assert checkpoint.load(tmp_path)["iter_num"] == 10  # the eval save before the interruption
    assert signal.getsignal(signal.SIGINT) is before


def _worker_of_rank(launcher_pid, rank):
    """The pid of the torchrun worker with RANK=rank, among the launcher's children."""
    for _ in range(600):
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{entry}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if ppid == launcher_pid and f"RANK={rank}".encode() in env:
                return int(entry)
        time.sleep(0.1)
    raise AssertionError(f"no worker with RANK={rank} under pid {launcher_pid}")


def test_sigterm_to_one_ddp_rank_stops_all_ranks_at_one_step(tiny_data, tmp_path):
    """torchrun with 2 processes; SIGTERM reaches rank 1 only. The ranks agree on it in their
    per-step all-reduce, so rank 0 saves the same step and every rank exits 143 without a hang."""
    p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          "train.py", *TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}",
                          "--max_iters=1000000", "--eval_interval=1000000", "--log_interval=1"],
                         cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
    try:
        for line in p.stdout:
            if line.startswith("iter "):
                break
        os.kill(_worker_of_rank(p.pid, 1), signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        p.kill()
    stopped = re.search(r"stopped by SIGTERM at iter (\d+): saved", out)
    assert stopped, out[-2000:] + err[-2000:]
    assert checkpoint.load(tmp_path)["iter_num"] == int(stopped[1])
    codes = re.findall(r"exitcode\s*:\s*(-?\d+)", err)  # as torchrun reports its workers
    assert codes and set(codes) == {"143"}, err[-2000:]
    assert 'train.py", line' not in err  # no traceback from the training script itself


def test_resuming_a_finished_run_says_it_is_at_max_iters(tiny_run, tiny_data, tmp_path, capsys):
    """Nothing is trained, evaluated, written or appended; the message says how to train longer."""
    from tests.inproc import copy_run, snapshot
    out = copy_run(tiny_run, tmp_path / "run")
    before = snapshot(out / "ckpt.pt"), snapshot(out / "log.jsonl")
    capsys.readouterr()
    code = run_train([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={out}", "--max_iters=10",
                      "--lr_decay_iters=10", "--init_from=resume"])
    got = capsys.readouterr()
    assert code == 0 and got.err == ""
    assert got.out.strip() == (f"{out / 'ckpt.pt'} is already at iteration 10, and max_iters is 10: nothing to "
                               f"train. To train longer, resume with --max_iters=N for some N > 10 (the learning "
                               f"rate stays at min_lr past lr_decay_iters=10; raise it too for a new decay)")
    assert (snapshot(out / "ckpt.pt"), snapshot(out / "log.jsonl")) == before
