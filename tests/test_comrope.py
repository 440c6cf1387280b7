"""ComRoPE (positional/comrope.py, the paper's LD variant): at initialisation RoPE on interleaved pairs; with any
(random) angle matrices the two axes' generators commute, R(row, col) = exp(row A_row) exp(col A_col), rotations
keep norms, and scores depend on the offset alone (shift invariance; on a grid, on (d_row, d_col)); one training
step moves the matrices. The registry-parametrised tests cover the cache, causality and the rest."""
import pytest
import torch

from positional.comrope import ComRoPE
from positional.rope import RoPE
from tests.conftest import rotate, tiny_gpt
from training.config import ConfigError, load_config

INTERLEAVED = torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])     # head_dim 8: channel order of RoPE's pairs, side by side


def randomised(pe, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pe.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return pe


def scores(pe, q, k, q_pos, k_pos):
    return rotate(pe, q, q_pos) @ rotate(pe, k, k_pos, key=True).transpose(-1, -2)


@pytest.mark.parametrize("block", [2, 4, 8])
def test_initialised_as_rope_on_interleaved_pairs(block):
    pe, plain = ComRoPE(8, block=block, base=16.0), RoPE(8, base=16.0)
    x = torch.randn(2, 3, 6, 8, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 7, 40, 1000])
    torch.testing.assert_close(rotate(pe, x[..., INTERLEAVED], pos), rotate(plain, x, pos)[..., INTERLEAVED],
                               rtol=1e-5, atol=1e-5)


def full(blocks):
    """(D, D) block-diagonal matrix of (n, b, b) blocks."""
    return torch.block_diag(*blocks)


def test_the_axes_generators_commute_and_compose():
    pe = randomised(ComRoPE(16, block=4, grid_width=5))
    A_row, A_col = (full(a) for a in pe.generators())                       # (D, D) each, skew-symmetric
    assert torch.allclose(A_row, -A_row.T) and not torch.allclose(A_row @ A_row.T, 0 * A_row)
    torch.testing.assert_close(A_row @ A_col, A_col @ A_row, rtol=1e-12, atol=1e-12)
    for p in (0, 3, 12, 49):
        r, c = divmod(p, 5)
        R = full(pe.rotations(torch.tensor([p]))[0])
        torch.testing.assert_close(R, torch.linalg.matrix_exp(r * A_row) @ torch.linalg.matrix_exp(c * A_col))
        torch.testing.assert_close(R.T @ R, torch.eye(16, dtype=torch.float64))   # a rotation: norms kept


@pytest.mark.parametrize("shift", [1, 37, 1000])
def test_scores_depend_on_the_offset_only(shift):
    pe = randomised(tiny_gpt("comrope").pe)
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 9, 8)
    q_pos, k_pos = torch.arange(3, 9), torch.arange(9)
    torch.testing.assert_close(scores(pe, q, k, q_pos, k_pos), scores(pe, q, k, q_pos + shift, k_pos + shift),
                               rtol=1e-4, atol=1e-4)


def test_on_a_grid_scores_depend_on_the_row_and_column_offsets():
    pe = randomised(ComRoPE(8, block=4, grid_width=5))
    q, k = torch.randn(1, 1, 1, 8, dtype=torch.float64), torch.randn(1, 1, 1, 8, dtype=torch.float64)
    at = lambda i, j: scores(pe, q, k, torch.tensor([i]), torch.tensor([j])).item()   # noqa: E731
    assert at(13, 7) == pytest.approx(at(6, 0), rel=1e-6)        # (2, 3) - (1, 2) = (1, 1) - (0, 0)
    assert at(24, 2) == pytest.approx(at(22, 0), rel=1e-6)       # (4, 4) - (0, 2) = (4, 2) - (0, 0)
    assert at(10, 4) != pytest.approx(at(6, 0), rel=1e-3)        # the same distance 6, offset (2, -4) not (1, 1)


def test_one_training_step_moves_the_angle_matrices():
    model = tiny_gpt("comrope").train()
    idx = torch.randint(0, 40, (2, 32))
    model(idx, idx)[1].backward()
    pe = model.pe
    assert pe.upper.grad.abs().sum() > 0 and pe.scale.grad[1].abs().sum() > 0   # the column axis: text
    assert torch.equal(pe.scale.grad[0], torch.zeros_like(pe.scale.grad[0]))     # no grid: no row axis


@pytest.mark.parametrize("arg", ["--comrope_block=3", "--comrope_block=16"])
def test_a_block_that_does_not_tile_the_head_is_one_line(arg):
    with pytest.raises(ConfigError) as e:
        load_config(["configs/comrope.py", "--n_embd=32", "--n_head=4", arg])
    assert "comrope_block must be even and divide head_dim=8" in str(e.value) and "\n" not in str(e.value)
