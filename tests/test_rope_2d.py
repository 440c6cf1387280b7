"""2-D (axial) RoPE (positional/rope_2d.py): the rotation written out by hand, the product of two
1-D RoPE rotations, scores that depend on (row, column) differences only, the no-grid fallback,
grid_width as an evaluation-time key, bad input, and a training run."""
import math
import re

import pytest
import torch

import positional
from model import GPT
from tests.conftest import TINY_ARGS, rotate, run_py, tiny_gpt
from training.config import ConfigError, eval_key, model_config


def scores(pe, q, k, q_pos, k_pos):
    """(B, H, Tq, Tk) q . k after the rotation, at positions q_pos, k_pos."""
    return rotate(pe, q, q_pos) @ rotate(pe, k, k_pos, key=True).transpose(-1, -2)


def test_rotation_by_hand():
    """D = 8, base 100, W = 5: p = 13 is (row 2, col 3); per axis theta = 100^(-2j/4) = 1, 0.1."""
    pe = positional.RoPE2D(head_dim=8, base=100.0, grid_width=5)
    x = torch.arange(1.0, 9.0)
    out = rotate(pe, x.view(1, 1, 1, 8), torch.tensor([13])).flatten()
    want = x.clone()
    for j, angle in enumerate([2 * 1.0, 2 * 0.1, 3 * 1.0, 3 * 0.1]):   # pairs (j, j + 4): row, row, col, col
        c, s = math.cos(angle), math.sin(angle)
        want[j], want[j + 4] = x[j] * c - x[j + 4] * s, x[j] * s + x[j + 4] * c
    torch.testing.assert_close(out, want)


def test_the_rotation_is_two_1d_rotations_one_per_axis():
    """R_(row, col) = R_row (+) R_col: the row channels (pairs 0, 1) turned by 1-D RoPE at the row,
    the column channels (pairs 2, 3) at the column, each RoPE over a head of D/2."""
    pe, rope = positional.RoPE2D(head_dim=8, grid_width=6), positional.RoPE(head_dim=4)
    x, pos = torch.randn(2, 3, 10, 8), torch.arange(40, 50)
    out = rotate(pe, x, pos)
    rows, cols = [0, 1, 4, 5], [2, 3, 6, 7]
    torch.testing.assert_close(out[..., rows], rotate(rope, x[..., rows], pos // 6))
    torch.testing.assert_close(out[..., cols], rotate(rope, x[..., cols], pos % 6))


def test_scores_depend_on_row_and_column_differences_only():
    pe = tiny_gpt("rope_2d", grid_width=7).pe
    q, k = torch.randn(1, 4, 1, 8), torch.randn(1, 4, 1, 8)
    at = lambda r1, c1, r2, c2: scores(pe, q, k, torch.tensor([7 * r1 + c1]), torch.tensor([7 * r2 + c2]))  # noqa: E731
    torch.testing.assert_close(at(3, 5, 1, 2), at(9, 4, 7, 1), rtol=1e-5, atol=1e-5)     # (2, 3) apart both times
    assert not torch.allclose(at(3, 5, 1, 2), at(3, 5, 2, 2), atol=1e-3)              # one row fewer: another score


def test_shifting_by_whole_rows_leaves_scores_unchanged_and_a_column_shift_does_not():
    pe = tiny_gpt("rope_2d", grid_width=6).pe
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 12, 8)
    q_pos, k_pos = torch.arange(6, 12), torch.arange(12)
    base = scores(pe, q, k, q_pos, k_pos)
    for rows in (1, 5, 300):
        torch.testing.assert_close(scores(pe, q, k, q_pos + 6 * rows, k_pos + 6 * rows), base, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(scores(pe, q, k, q_pos + 1, k_pos + 1), base, atol=1e-3)   # wraps differently


def test_without_a_grid_it_is_one_row():
    """grid_width 0: row 0 (the row channels untouched), col = position (1-D RoPE on the rest)."""
    pe, rope = positional.RoPE2D(head_dim=8), positional.RoPE(head_dim=4)
    x, pos = torch.randn(1, 2, 5, 8), torch.arange(100, 105)
    out = rotate(pe, x, pos)
    assert torch.equal(out[..., [0, 1, 4, 5]], x[..., [0, 1, 4, 5]])
    torch.testing.assert_close(out[..., [2, 3, 6, 7]], rotate(rope, x[..., [2, 3, 6, 7]], pos))


def test_grid_width_is_an_evaluation_time_key():
    assert eval_key("grid_width", 16, {}) == 16
    args = dict(block_size=16, vocab_size=10, n_layer=1, n_head=2, n_embd=16, pos_encoding="rope_2d",
                pos_settings={"grid_width": 8})
    assert GPT(model_config(args, {"grid_width": 16})).pe.axial.grid_width == 16
    with pytest.raises(ConfigError, match="would change the trained model"):
        eval_key("n_head", 4, {})


@pytest.mark.parametrize("kw, message", [
    (dict(n_embd=24, n_head=4), "rope_2d needs a head dim divisible by 4"),
    (dict(grid_width=-1), "grid_width must be >= 0"),
    (dict(rope_base=1.0), "rope_base must be > 1"),
    (dict(rope_scaling="yarn", rope_factor=2.0), "needs a rotary encoding"),
])
def test_bad_settings_are_refused_in_one_line(kw, message):
    with pytest.raises(ValueError, match=message) as e:
        tiny_gpt("rope_2d", **kw)
    assert len(str(e.value).splitlines()) == 1


@pytest.mark.slow
def test_training_loss_falls_and_the_checkpoint_reloads(tiny_data, tmp_path):
    r = run_py("train.py", "configs/rope_2d.py", *TINY_ARGS, "--grid_width=4", f"--data_dir={tiny_data}",
               f"--out_dir={tmp_path}")
    losses = [float(v) for v in re.findall(r"step \d+: train loss [0-9.]+, val loss ([0-9.]+)", r.stdout)]
    assert len(losses) == 4 and losses[-1] < losses[0] - 1.0, r.stdout
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    model = GPT(model_config(ckpt["model_args"]))
    model.load_state_dict(ckpt["model"])
    assert model.pe.name == "rope_2d" and model.pe.axial.grid_width == 4
