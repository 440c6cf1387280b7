"""A resumed run continues its wandb run: the checkpoint keeps the run id, and the resume
logs under the same id (offline here), its steps following the first part's."""
import pytest
import glob
import os

from tests.conftest import TINY_ARGS, run_py
from tests.wandb_reader import history
from training import checkpoint

pytestmark = pytest.mark.slow   # train.py in subprocesses


def test_resume_continues_the_same_wandb_run(tiny_data, tmp_path):
    argv = ["train.py", *TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--wandb_log=True",
            "--eval_interval=5", "--eval_iters=1"]
    env = {"WANDB_MODE": "offline", "HOME": str(tmp_path)}
    run_py(*argv, "--max_iters=5", env=env, timeout=120)
    run_id = checkpoint.load(tmp_path)["wandb_id"]
    assert run_id and glob.glob(str(tmp_path / "wandb" / f"offline-run-*-{run_id}"))
    run_py(*argv, "--max_iters=10", "--init_from=resume", env=env, timeout=120)
    runs = sorted(glob.glob(str(tmp_path / "wandb" / "offline-run-*" / "run-*.wandb")))
    assert len(runs) == 2 and all(os.path.basename(r) == f"run-{run_id}.wandb" for r in runs)   # one id, twice
    assert checkpoint.load(tmp_path)["wandb_id"] == run_id
    steps = [row["iter"] for row in history(runs[1]) if "val/loss" in row]
    assert steps == [5, 10]   # the resumed part starts where the first stopped (its evaluation at 5 first)
