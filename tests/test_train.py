"""End to end: training on tiny data, DDP with torchrun, wandb offline, sampling.
Resume, checkpoints, numerics and bad input have their own files (test_resume.py, ...)."""
import glob
import os
import re

import pytest
import torch

from tests.conftest import TINY_ARGS, run_py
from tests.wandb_reader import history


def val_losses(stdout):
    return [float(v) for v in re.findall(r"step \d+: train loss [0-9.]+, val loss ([0-9.]+)", stdout)]


@pytest.mark.parametrize("config", ["rope", "alibi"])
def test_training_loss_falls(tiny_data, tmp_path, config):
    r = run_py("train.py", f"configs/{config}.py", *TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}")
    losses = val_losses(r.stdout)
    assert len(losses) == 4 and losses[-1] < losses[0] - 1.0, r.stdout
    assert os.path.exists(tmp_path / "ckpt.pt")
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert ckpt["iter_num"] == 30 and ckpt["model_args"]["pos_encoding"] == config
    assert ckpt["config"]["max_iters"] == 30 and "optimizer" in ckpt


def test_torchrun_two_processes(tiny_data, tmp_path):
    r = run_py("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py", *TINY_ARGS,
               f"--data_dir={tiny_data}", "--max_iters=10", f"--out_dir={tmp_path}", env={"OMP_NUM_THREADS": "1"})
    assert "2 process(es)" in r.stdout and "done: 10 iterations" in r.stdout
    assert torch.load(tmp_path / "ckpt.pt", weights_only=False)["iter_num"] == 10


def test_wandb_offline_run_has_the_metrics(tiny_data, tmp_path):
    env = {"WANDB_MODE": None, "WANDB_API_KEY": None, "HOME": str(tmp_path), "NETRC": str(tmp_path / "none")}
    r = run_py("train.py", "configs/t5.py", *TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path / 'out'}",
               "--wandb_log=True", "--wandb_group=cmp", env=env, timeout=120)
    assert "logging offline" in r.stdout
    runs = glob.glob(str(tmp_path / "out" / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(runs) == 1
    sync = re.findall(r"upload later with: wandb sync (\S+)\n", r.stdout)  # the line names the folder to sync
    assert sync == [os.path.dirname(runs[0])]
    rows = history(runs[0])
    vals = [row["val/loss"] for row in rows if "val/loss" in row]
    assert len(vals) == 4 and vals[-1] < vals[0]
    assert any("tokens_per_sec" in row and "lr" in row for row in rows)


def test_sample_streams_past_block_size(tiny_data, tmp_path):
    for enc in ("learned", "alibi"):
        run_py("train.py", f"configs/{enc}.py", *TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path / enc}")
        r = run_py("sample.py", f"--out_dir={tmp_path / enc}", "--start=All:", "--max_new_tokens=60", "--num_samples=2")
        samples = r.stdout.split("---------------")
        assert len(samples) == 3 and all(s.strip().startswith("All:") for s in samples[:2])
        assert all(len(s.strip()) >= 60 for s in samples[:2])  # 16-token block, 64 tokens of text
        assert ("sliding" in r.stderr or "positions" in r.stderr) == (enc == "learned")
