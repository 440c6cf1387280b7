"""Numerical health: every encoding stays finite far past the training length in float32
and bfloat16, and a non-finite loss never reaches a checkpoint."""
import math

import pytest
import torch

from training import checkpoint
import positional
from training.config import load_file
from tests.conftest import TINY_ARGS, tiny_gpt
from tests.inproc import copy_run, on_training_forward, run_train, snapshot, train_error

TRAIN_LEN = load_file("configs/base.py")["block_size"]  # the recipe's training length
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def forward(model, idx, dtype):
    with torch.no_grad(), torch.autocast("cpu", dtype=DTYPES[dtype], enabled=dtype != "float32"):
        return model(idx, idx)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", positional.REGISTRY)
def test_forward_finite_at_16x_training_length(name, dtype):
    """One full forward over 16 x block_size tokens (a position table stops at its size)."""
    model = tiny_gpt(name, block_size=TRAIN_LEN, n_layer=1, n_head=2, n_embd=16)
    T = min(16 * TRAIN_LEN, model.pe.max_positions or math.inf)
    logits, loss = forward(model, torch.randint(0, 40, (1, T), generator=torch.Generator().manual_seed(0)), dtype)
    assert logits.shape == (1, T, 40)
    assert torch.isfinite(logits).all() and torch.isfinite(loss)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", positional.REGISTRY)
def test_far_positions_finite_or_refused(name, dtype):
    """8 queries at positions 32760..32767 over a KV cache of 32768 keys (256 x the training
    length): finite, or, past the encoding's max_positions (learned: its table; xpos: 28,231,
    where float32 scales would overflow), a one-line ValueError before any computation; and
    then finite at the longest length it accepts."""
    model = tiny_gpt(name, block_size=TRAIN_LEN, n_layer=1, n_head=2, n_embd=16)
    idx = torch.randint(0, 40, (1, 8), generator=torch.Generator().manual_seed(0))
    n = 32768
    limit = model.pe.max_positions or math.inf
    if n > limit:
        model.setup_cache(1, n)
        model.kv_cache.length = n - 8
        with pytest.raises(ValueError, match=f"{limit}"):
            forward(model, idx, dtype)
        n = limit
    model.setup_cache(1, n)
    model.kv_cache.length = n - 8  # unwritten cache entries are zeros: only the positions matter here
    logits, loss = forward(model, idx, dtype)
    assert torch.isfinite(logits).all() and torch.isfinite(loss)


def test_xpos_limit_is_where_float32_would_overflow():
    from positional.xpos import MAX_SCALE, xpos_scale
    n = tiny_gpt("xpos", xpos_scale_base=512.0).pe.max_positions
    assert n == 28231
    s = xpos_scale(torch.tensor([n, 2 * n]), 16, 512.0)
    assert (1 / s[0]).max() <= MAX_SCALE < torch.finfo(torch.float32).max / 1e8
    assert not torch.isfinite(1 / s[1]).all()  # twice as far, the key scales overflow
    assert 16 * TRAIN_LEN < n


def test_nan_loss_stops_naming_the_step_and_keeps_the_checkpoint(tiny_data, tmp_path, monkeypatch, capsys):
    path = checkpoint.path_in(tmp_path)
    seen = {}

    def hook(n, loss, model):
        if n == 15:
            seen["before"] = snapshot(path)  # the checkpoint of iter 10, as it is when the NaN appears
            return loss * float("nan")
        return loss

    on_training_forward(monkeypatch, hook)
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}"], capsys, code=1)
    assert ("error: the training loss is nan at iter 15; stopped without saving: the last good checkpoint "
            "(iter 10) is untouched") in err
    assert snapshot(path) == seen["before"] and checkpoint.load(tmp_path)["iter_num"] == 10


def test_real_divergence_never_overwrites_the_good_checkpoint(tiny_run, tiny_data, tmp_path, capsys):
    """A learning rate of 1e30 blows the weights up within a few steps: the run stops, exit 1."""
    out = copy_run(tiny_run, tmp_path / "run")
    before = snapshot(checkpoint.path_in(out))
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={out}", "--init_from=resume",
                       "--learning_rate=1e30", "--grad_clip=0.0"], capsys, code=1)
    assert "not finite" in err or "loss is nan" in err or "loss is inf" in err
    assert "the last good checkpoint (iter 10) is untouched" in err
    assert snapshot(checkpoint.path_in(out)) == before


def test_skip_mode_skips_and_counts(tiny_data, tmp_path, monkeypatch, capsys):
    on_training_forward(monkeypatch, lambda n, loss, model: loss * float("nan") if n in (4, 5) else loss)
    argv = [*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--max_iters=10", "--on_nonfinite=skip"]
    assert run_train(argv) == 0
    out = capsys.readouterr().out
    assert "iter 4: loss nan, step skipped (1 so far)" in out and "iter 5: loss nan, step skipped (2 so far)" in out
    assert "done: 10 iterations" in out and "2 step(s) skipped for a non-finite loss" in out
    ckpt = checkpoint.load(tmp_path)
    assert ckpt["nonfinite_skipped"] == 2 and ckpt["iter_num"] == 10
    assert all(torch.isfinite(v).all() for v in ckpt["model"].values())  # NaN gradients never applied


def test_nonfinite_weights_are_never_saved(tiny_data, tmp_path, monkeypatch, capsys):
    """Skip mode cannot heal weights that are already NaN (say, from a broken optimizer step):
    every later loss is skipped, and the next save refuses to write them."""
    def corrupt(n, loss, model):
        if n == 12:
            model.lm_head.weight.data[0, 0] = float("nan")  # .data: behind autograd's back
        return loss

    on_training_forward(monkeypatch, corrupt)
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--on_nonfinite=skip"],
                      capsys, code=1)
    assert ("error: the weights are not finite at iter 20; stopped without saving: the last good checkpoint "
            "(iter 10) is untouched") in err
    assert checkpoint.load(tmp_path)["iter_num"] == 10
