"""Run train.py and sample.py inside the test process: no interpreter start-up per run,
and a hook on every training forward pass to record losses or inject faults."""
import os
import shutil

import pytest

import sample
import train
from model import GPT


def run_train(argv):
    """train.main(argv) -> its exit code (0 when it returns normally)."""
    try:
        train.main(argv)
    except SystemExit as e:
        return e.code
    return 0


def one_line_error(main, argv, capsys, code=2):
    """Run main(argv), expecting exit `code` with exactly one line on stderr; return that line."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == code and len(err.splitlines()) == 1 and err.startswith("error: "), (e.value.code, err)
    return err


def train_error(argv, capsys, code=2):
    return one_line_error(train.main, argv, capsys, code)


def sample_error(argv, capsys):
    return one_line_error(sample.main, argv, capsys)


def on_training_forward(monkeypatch, hook=None):
    """Record the loss of every training forward pass (model.train(), targets given), in order.
    hook(n, loss, model) -> loss is called with the 1-based count and may replace the loss or act."""
    losses, real = [], GPT.forward

    def forward(self, idx, targets=None, pos=None):
        logits, loss = real(self, idx, targets, pos)
        if self.training and targets is not None:
            losses.append(loss.item())
            if hook is not None:
                loss = hook(len(losses), loss, self)
        return logits, loss

    monkeypatch.setattr(GPT, "forward", forward)
    return losses


def snapshot(path):
    """(bytes, mtime_ns) of a file: equal snapshots mean the file was not touched."""
    with open(path, "rb") as f:
        return f.read(), os.stat(path).st_mtime_ns


def copy_run(src_dir, dst_dir):
    """A private copy of an out_dir (mtimes kept), so that a test may damage it."""
    shutil.copytree(src_dir, dst_dir, dirs_exist_ok=True)
    return dst_dir
