"""End to end: training on tiny data, resume, DDP with torchrun, wandb offline, sampling,
and the one-line errors for bad input."""
import glob
import os
import re
import sys

import pytest
import torch

import train
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


def test_resume_continues_exactly(tiny_data, tmp_path):
    """20 steps, stop, resume to 40 == 40 steps in one go (bitwise on CPU)."""
    common = [*TINY_ARGS, f"--data_dir={tiny_data}", "--dropout=0.1", "--lr_decay_iters=40"]
    run_py("train.py", *common, "--max_iters=40", f"--out_dir={tmp_path / 'straight'}")
    run_py("train.py", *common, "--max_iters=20", f"--out_dir={tmp_path / 'split'}")
    r = run_py("train.py", *common, "--max_iters=40", f"--out_dir={tmp_path / 'split'}", "--init_from=resume")
    assert "resumed from" in r.stdout
    a = torch.load(tmp_path / "straight" / "ckpt.pt", weights_only=False)
    b = torch.load(tmp_path / "split" / "ckpt.pt", weights_only=False)
    assert b["iter_num"] == 40
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k


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


def main_error(argv, capsys):
    with pytest.raises(SystemExit) as e:
        train.main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("argv, message", [
    (["--pos_encoding=rotary"], "unknown pos_encoding 'rotary'; valid: none, learned, sinusoidal, t5, alibi, rope, xpos"),
    (["--n_layr=2"], "unknown config key 'n_layr'; did you mean 'n_layer'?"),
    (["--n_layer=two"], "config key 'n_layer' wants a int, got 'two'"),
    (["--learning_rate=[1]"], "config key 'learning_rate' wants a float"),
    (["--n_embd=100", "--n_head=3"], "n_embd=100 is not divisible by n_head=3"),
    (["--n_embd=24", "--n_head=2", "--rotary_fraction=0.25"], "rotary dimension must be even"),
    (["configs/nothere.py"], "config file 'configs/nothere.py' not found"),
    (["--batch_size=0"], "batch_size must be >= 1"),
    (["--dataset=nope"], "dataset 'nope' is not prepared"),
    (["n_layer=2"], "overrides look like --key=value"),
])
def test_bad_input_gets_one_line(argv, message, capsys, tiny_data, tmp_path):
    base = [f"--data_dir={tiny_data}", "--dataset=tiny", f"--out_dir={tmp_path}"]
    err = main_error(base + argv, capsys)
    assert message in err
    assert not os.path.exists(tmp_path / "ckpt.pt")


def test_config_file_that_raises(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("n_layer = 1 / 0\n")
    assert "raised ZeroDivisionError" in main_error([str(bad)], capsys)
