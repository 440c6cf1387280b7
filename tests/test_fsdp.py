"""FSDP2 (--parallel=fsdp, training/sharding.py): 2 processes (gloo, CPU) stopped at N and resumed
to 2N give the losses and, bitwise, the weights and optimizer state of one uninterrupted 2N run.
The checkpoint is a one-process run's: sample.py's loader reads it, its optimizer state is keyed as
torch.optim keys it (a DDP run's layout), and its weights are DDP's up to rounding. T5's table is a
parameter of the root that every block reads through its score bias; two blocks, two shard groups."""
import re

import pytest
import torch

from tests.conftest import TINY_ARGS, run_py
from tests.inproc import copy_run, train_error
from tests.test_ddp_resume import TORCHRUN
from training import checkpoint


def losses(stdout):
    """{iteration: printed training loss} and {evaluation step: (train loss, val loss)} of a run's output."""
    steps = {int(i): float(v) for i, v in re.findall(r"iter (\d+)/\d+: loss ([0-9.]+)", stdout)}
    evals = {int(i): (float(a), float(b)) for i, a, b in re.findall(r"step (\d+): train loss ([0-9.]+), val loss "
                                                                      r"([0-9.]+)", stdout)}
    return steps, evals


def layout(optimizer):
    """An optimizer state dict's keys and shapes, without its values."""
    state = {i: {k: tuple(v.shape) for k, v in s.items()} for i, s in optimizer["state"].items()}
    return state, [g["params"] for g in optimizer["param_groups"]]


@pytest.mark.slow
def test_stop_and_resume_under_fsdp_equals_one_run(tiny_data, tmp_path):
    args = [*TINY_ARGS, f"--data_dir={tiny_data}", "--pos_encoding=t5", "--n_layer=2", "--dropout=0.1",
            "--max_iters=8", "--eval_interval=4", "--lr_decay_iters=8", "--eval_iters=1", "--log_interval=1",
            "--backend=gloo"]
    fsdp = [*TORCHRUN, *args, "--parallel=fsdp"]
    straight = run_py(*fsdp, f"--out_dir={tmp_path / 'straight'}")
    run_py(*fsdp, f"--out_dir={tmp_path / 'resumed'}", "--max_iters=4")
    resumed = run_py(*fsdp, f"--out_dir={tmp_path / 'resumed'}", "--init_from=resume")
    mine, total = (int(n.replace(",", "")) for n in re.search(r"rank 0 holds ([\d,]+) of ([\d,]+) parameters",
                                                               straight.stdout).groups())
    assert 0.4 * total < mine < 0.6 * total                          # half of them each, give or take a row
    (steps, evals), (want_steps, want_evals) = losses(resumed.stdout), losses(straight.stdout)
    assert sorted(steps) == [5, 6, 7, 8] and sorted(evals) == [4, 8]
    assert steps == {i: v for i, v in want_steps.items() if i > 4} and evals == {4: want_evals[4], 8: want_evals[8]}
    want, got = checkpoint.load(tmp_path / "straight"), checkpoint.load(tmp_path / "resumed")
    assert got["iter_num"] == want["iter_num"] == 8 and len(got["rng"]) == 2
    for k, v in want["model"].items():
        assert torch.equal(got["model"][k], v), k
    assert layout(got["optimizer"]) == layout(want["optimizer"])
    for i, s in want["optimizer"]["state"].items():
        assert all(torch.equal(got["optimizer"]["state"][i][k], v) for k, v in s.items()), i

    model, _ = checkpoint.load_model(tmp_path / "resumed")          # as sample.py and evaluate.py load it
    assert model.state_dict().keys() == want["model"].keys()
    run_py(*TORCHRUN, *args, f"--out_dir={tmp_path / 'ddp'}")
    ddp = checkpoint.load(tmp_path / "ddp")
    assert layout(ddp["optimizer"]) == layout(want["optimizer"])
    for k, v in ddp["model"].items():                                # the same training, sharded: up to rounding
        torch.testing.assert_close(want["model"][k], v, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("argv, torchrun, message", [
    (["--parallel=fsdp"], False, "parallel=fsdp shards the model across torchrun's processes, and this is one "
                                 "process (no torchrun); launch with torchrun --standalone --nproc_per_node=N"),
    (["--parallel=zero3"], True, "parallel must be ddp or fsdp, got 'zero3'"),
    (["--parallel=fsdp", "--dtype=float16"], True, "parallel=fsdp trains in float32 or bfloat16"),
    (["--parallel=fsdp", "--finetune_method=longlora", "--init_from=resume"], True,
     "finetune_method=longlora merges its adapters into whole weights, which parallel=fsdp does not hold"),
    (["--parallel=fsdp", "--pos_encoding=fire"], True,
     "parallel=fsdp cannot shard fire's 0-dimensional parameters (pe.c, pe.L_multiplier): fully_shard splits tensors "
     "along their first dimension; train it with DDP (drop --parallel)"),
])
def test_bad_parallel_settings_are_refused(argv, torchrun, message, tiny_run, tiny_data, tmp_path, monkeypatch,
                                           capsys):
    if torchrun:
        monkeypatch.setenv("RANK", "0")   # as torchrun sets it; refused before any process group is joined
    out = copy_run(tiny_run, tmp_path / "run")
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={out}", *argv], capsys)
    assert message in err
