"""Checkpoints survive faults: a SIGKILL in the middle of a save, a damaged file, a
checkpoint of another model. Every failure is one line, and ckpt.pt is never modified."""
import glob
import os
import random
import resource
import signal
import time

import pytest
import torch

from training import checkpoint
import sample
from tests.conftest import TINY_ARGS, tiny_gpt
from tests.inproc import copy_run, run_train, sample_error, snapshot, train_error


def _save_forever(out_dir, state, first, report_fd):
    """Child process: save checkpoints first, first+1, ... and report each one once it is on disk."""
    torch.set_num_threads(1)
    n = first
    while True:
        marker = torch.full((1 << 18,), n, dtype=torch.int32)  # 1 MiB that must agree with iter_num
        checkpoint.save({"model": state, "model_args": {}, "config": {}, "iter_num": n, "marker": marker},
                        checkpoint.path_in(out_dir))
        os.write(report_fd, f"{n}\n".encode())
        n += 1


@pytest.mark.slow
def test_sigkill_during_save_leaves_the_previous_or_the_new_checkpoint(tmp_path):
    """25 times: a process saving in a loop is SIGKILLed at a random moment; ckpt.pt must then
    load and be either the last checkpoint it reported saved, or the one it was writing."""
    rng = random.Random(0)
    state = tiny_gpt("rope").state_dict()
    checkpoint.save({"model": state, "model_args": {}, "config": {}, "iter_num": 0,
                     "marker": torch.zeros(1 << 18, dtype=torch.int32)}, checkpoint.path_in(tmp_path))
    last, mid_save, outcomes = 0, 0, set()
    for _ in range(25):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child never returns into pytest
            try:
                os.close(r)
                _save_forever(tmp_path, state, last + 1, w)
            finally:
                os._exit(1)
        os.close(w)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(r) as f:
            reported = [int(line) for line in f.read().split()]
        prev = reported[-1] if reported else last
        mid_save += bool(glob.glob(str(tmp_path / ".ckpt-*.tmp")))
        ckpt = checkpoint.load(tmp_path)  # never raises: the file is always complete
        assert ckpt["iter_num"] in (prev, prev + 1), (ckpt["iter_num"], prev)
        assert (ckpt["marker"] == ckpt["iter_num"]).all()
        assert all(torch.equal(ckpt["model"][k], v) for k, v in state.items())
        outcomes.add(ckpt["iter_num"] - prev)
        last = ckpt["iter_num"]
        checkpoint.remove_partial(tmp_path)
        assert not glob.glob(str(tmp_path / ".ckpt-*.tmp"))
    assert mid_save >= 8, f"only {mid_save} of 25 kills landed inside a save; the test lost its point"
    assert last >= 25


def _damage(path, how):
    data = open(path, "rb").read()
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "garbage":
        data = bytes(random.Random(1).randrange(256) for _ in range(4096))
    elif how == "empty":
        data = b""
    else:
        raise AssertionError(how)
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty"])
def test_damaged_checkpoint_is_one_line_and_left_untouched(tiny_run, tiny_data, tmp_path, capsys, how):
    out = copy_run(tiny_run, tmp_path / "run")
    path = checkpoint.path_in(out)
    _damage(path, how)
    before = snapshot(path)
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={out}", "--init_from=resume"], capsys)
    assert f"checkpoint {path} is unreadable (truncated or corrupt?)" in err and "left untouched" in err
    assert "--overwrite=True" in err and len(err) < len(str(path)) + 160   # the fix, not PyTorch's paragraph
    err = sample_error([f"--out_dir={out}", "--max_new_tokens=5"], capsys)
    assert "is unreadable (truncated or corrupt?)" in err
    assert snapshot(path) == before


@pytest.mark.parametrize("content, message", [
    ([1, 2, 3], "lacks model, model_args, config, iter_num: not written by this repo's train.py"),
    ({"model": {}, "model_args": {}, "config": {}, "iter_num": 3}, "has no optimizer state"),
])
def test_foreign_checkpoint_is_one_line(tiny_data, tmp_path, capsys, content, message):
    torch.save(content, checkpoint.path_in(tmp_path))
    before = snapshot(checkpoint.path_in(tmp_path))
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--init_from=resume"], capsys)
    assert message in err
    assert snapshot(checkpoint.path_in(tmp_path)) == before


@pytest.mark.parametrize("override, message", [
    ("--pos_encoding=alibi", "has pos_encoding=rope, config asks for alibi"),
    ("--n_layer=2", "has n_layer=1, config asks for 2"),
    ("--n_embd=64", "has n_embd=32, config asks for 64"),
    ("--block_size=8", None),  # not a shape key for rope: resuming with a shorter context is allowed
])
def test_resume_with_another_model_names_the_mismatch(tiny_run, tiny_data, tmp_path, capsys, override, message):
    out = copy_run(tiny_run, tmp_path / "run")
    before = snapshot(checkpoint.path_in(out))
    argv = [*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={out}", "--init_from=resume", override]
    if message is None:
        assert run_train([*argv, "--max_iters=12"]) == 0
        assert checkpoint.load(out)["iter_num"] == 12
        return
    err = train_error(argv, capsys)
    assert f"error: checkpoint in {out} has" in err and message in err and "use the checkpoint's value" in err
    assert snapshot(checkpoint.path_in(out)) == before


def test_scratch_run_does_not_overwrite_a_checkpoint(tiny_run, tiny_data, tmp_path, capsys):
    out = copy_run(tiny_run, tmp_path / "run")
    before = snapshot(checkpoint.path_in(out))
    argv = [*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={out}", "--max_iters=10"]
    err = train_error(argv, capsys)
    assert "ckpt.pt already exists and a scratch run would overwrite it; resume it with --init_from=resume" in err
    assert snapshot(checkpoint.path_in(out)) == before
    (out / ".ckpt-stale.tmp").write_bytes(b"half a checkpoint")  # left by a save that was SIGKILLed
    assert run_train([*argv, "--overwrite=True", "--max_iters=2", "--eval_interval=2"]) == 0
    assert checkpoint.load(out)["iter_num"] == 2
    assert not glob.glob(str(out / ".ckpt-*.tmp"))


def test_sample_rebuilds_from_the_checkpoint_alone(tiny_run, capsys):
    sample.main([f"--out_dir={tiny_run}", "--start=All:", "--max_new_tokens=20"])
    out = capsys.readouterr().out
    assert out.startswith("All:") and len(out.split("---------------")[0]) >= 24
    err = sample_error([f"--out_dir={tiny_run}", "--n_layer=3"], capsys)
    assert "--n_layer would change the trained model" in err       # refused before any weight is read
    with pytest.raises(ValueError, match=r"the checkpoint's weights do not fit the model with \{'n_layer': 3\}"):
        checkpoint.build_model(checkpoint.load(tiny_run), {"n_layer": 3})   # the library's own check stays


def test_a_full_disk_stops_the_run_and_keeps_the_last_checkpoint(tiny_data, tmp_path, monkeypatch, capsys):
    """The second save meets a real write error (RLIMIT_FSIZE makes the kernel refuse writes past
    4 kB with EFBIG, as a full disk would with ENOSPC): one line, exit 1, iter 10 kept, no tmp file."""
    real_save, path = checkpoint.save, checkpoint.path_in(tmp_path)
    seen = {}

    def save_on_a_full_disk(obj, dest):
        if obj["iter_num"] < 20:
            return real_save(obj, dest)
        seen["before"] = snapshot(path)
        old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
        old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, old_limit[1]))
        try:
            return real_save(obj, dest)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
            signal.signal(signal.SIGXFSZ, old_handler)

    monkeypatch.setattr(checkpoint, "save", save_on_a_full_disk)
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}"], capsys, code=1)
    assert f"error: could not write {path} (" in err and "MB free there); the previous checkpoint is intact" in err
    assert snapshot(path) == seen["before"] and checkpoint.load(tmp_path)["iter_num"] == 10
    assert not glob.glob(str(tmp_path / ".ckpt-*.tmp"))
