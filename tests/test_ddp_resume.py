"""Exact resume under DDP: 2 processes (gloo, CPU) stopped at N and resumed to 2N end with
the weights of one uninterrupted 2N run, bitwise; each rank continues its own batches and
dropout from the random states the checkpoint keeps for every rank."""
import pytest
import torch

from tests.conftest import TINY_ARGS, run_py
from training import checkpoint

pytestmark = pytest.mark.slow   # torchrun

TORCHRUN = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py"]


def test_stop_and_resume_under_ddp_equals_one_run(tiny_data, tmp_path):
    args = [*TINY_ARGS, f"--data_dir={tiny_data}", "--dropout=0.1", "--max_iters=8", "--eval_interval=4",
            "--lr_decay_iters=8", "--eval_iters=1", "--backend=gloo"]
    run_py(*TORCHRUN, *args, f"--out_dir={tmp_path / 'straight'}")
    run_py(*TORCHRUN, *args, f"--out_dir={tmp_path / 'resumed'}", "--max_iters=4")
    half = checkpoint.load(tmp_path / "resumed")
    assert half["iter_num"] == 4 and len(half["rng"]) == 2                       # both ranks' states
    assert not torch.equal(half["rng"][0]["data"], half["rng"][1]["data"])      # each its own batches
    run_py(*TORCHRUN, *args, f"--out_dir={tmp_path / 'resumed'}", "--init_from=resume")
    want, got = checkpoint.load(tmp_path / "straight"), checkpoint.load(tmp_path / "resumed")
    assert got["iter_num"] == want["iter_num"] == 8
    for k, v in want["model"].items():
        assert torch.equal(got["model"][k], v), k
