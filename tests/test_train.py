"""End to end: training on tiny data, DDP with torchrun, wandb offline, sampling.
Resume, checkpoints, numerics and bad input have their own files (test_resume.py, ...)."""
import glob
import os
import re

import pytest
import torch

from tests.conftest import ROOT, TINY_ARGS, run_py
from tests.wandb_reader import history

pytestmark = pytest.mark.slow   # train.py and sample.py in subprocesses, torchrun


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


def test_torchrun_into_an_existing_out_dir_is_one_line_from_rank_0(tiny_run, tiny_data, tmp_path):
    """The refusal comes before the process group exists: rank 0 says it, every rank exits 2,
    and no rank prints a traceback (the launcher's summary of the exit codes is its own)."""
    import shutil
    out = shutil.copytree(tiny_run, tmp_path / "run")
    r = run_py("-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "train.py", *TINY_ARGS,
               f"--data_dir={tiny_data}", f"--out_dir={out}", env={"OMP_NUM_THREADS": "1"}, check=False)
    assert r.returncode != 0 and r.stderr.count("error: ") == 1, r.stderr
    assert "already exists and a scratch run would overwrite it" in r.stderr
    assert 'File "' + os.path.join(ROOT, "train.py") not in r.stderr     # no rank's traceback


def test_a_shortened_run_moves_its_schedule_and_says_so(tiny_data, tmp_path):
    from training.config import load_config
    said = []
    cfg = load_config(["configs/rope.py", "--max_iters=300"], say=said.append)   # the file: 3000, 3000, 100
    assert (cfg.lr_decay_iters, cfg.warmup_iters) == (300, 10)
    assert said == ["schedule: max_iters 3000 -> 300, so lr_decay_iters 3000 -> 300, warmup_iters 100 -> 10 "
                    "(the same shape; set them on the command line to keep others)"]
    cfg = load_config(["configs/rope.py", "--max_iters=300", "--lr_decay_iters=3000"], say=said.append)
    assert (cfg.lr_decay_iters, cfg.warmup_iters) == (3000, 10)          # set by the user: kept
    cfg = load_config(["configs/rope.py"], say=said.append)
    assert (cfg.lr_decay_iters, cfg.warmup_iters) == (3000, 100) and len(said) == 2
    assert load_config(["--max_iters=400"]).warmup_iters == 20            # over the defaults (2000, 100)
    r = run_py("train.py", "configs/rope.py", *TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}")
    assert "schedule: max_iters 3000 -> 30, so lr_decay_iters 3000 -> 30" in r.stdout
    assert torch.load(tmp_path / "ckpt.pt", weights_only=False)["config"]["lr_decay_iters"] == 30
