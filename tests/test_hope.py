"""HoPE (positional/hope.py): which pairs keep rotating, worked by hand from the turns within L; the others pass
unrotated and score content alone at every distance; RoPE's rotation on the kept pairs; invariance to
shifting both positions; RoPE exactly when every pair is kept; the cut's length pinned to the training length.
The registry-parametrised tests (test_encodings, test_decode, ...) cover the cache, causality and training."""
import math

import pytest
import torch

import positional
from positional.hope import HoPE, rotating_pairs
from positional.rope import RoPE
from tests.conftest import rotate, tiny_gpt
from training.config import load_config

THETA = torch.tensor([1.0, 0.5, 0.25, 0.125], dtype=torch.float64)   # head_dim 8, base 16


@pytest.mark.parametrize("length, turns, keep", [
    (26, 1.0, [1, 1, 1, 0]),    # 26 theta / 2 pi = 4.14, 2.07, 1.03, 0.52 turns
    (26, 2.0, [1, 1, 0, 0]),
    (13, 1.0, [1, 1, 0, 0]),    # 2.07, 1.03, 0.52, 0.26
    (60, 1.0, [1, 1, 1, 1]),    # 9.5, 4.8, 2.4, 1.19
])
def test_the_pairs_that_turn_within_the_length_keep_rotating(length, turns, keep):
    assert rotating_pairs(THETA, length, turns).tolist() == [bool(k) for k in keep]
    assert HoPE(8, base=16.0, length=length, turns=turns).keep.tolist() == keep


def test_frozen_pairs_pass_unrotated_and_the_others_as_rope():
    pe, plain = HoPE(8, base=16.0, length=26), RoPE(8, base=16.0)
    x = torch.randn(2, 3, 5, 8)
    pos = torch.arange(100, 105)
    got, want = rotate(pe, x, pos), rotate(plain, x, pos)
    frozen, kept = [3, 7], [0, 1, 2, 4, 5, 6]                      # pair 3: channels 3 and 3 + 4 (half-split)
    assert torch.equal(got[..., frozen], x[..., frozen])
    torch.testing.assert_close(got[..., kept], want[..., kept])


def test_frozen_pairs_score_content_alone_at_every_distance():
    pe = HoPE(8, base=16.0, length=26, turns=2.0)                  # pairs 2, 3 frozen: channels 2, 3, 6, 7
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    ch = [2, 3, 6, 7]
    content = (q[..., ch] * k[..., ch]).sum()
    for m, n in [(0, 0), (7, 3), (500, 2), (9, 40)]:
        qm, kn = rotate(pe, q, torch.tensor([m])), rotate(pe, k, torch.tensor([n]), key=True)
        torch.testing.assert_close((qm[..., ch] * kn[..., ch]).sum(), content)


@pytest.mark.parametrize("shift", [1, 37, 1000])
def test_scores_are_invariant_to_shifting_both_positions(shift):
    pe = tiny_gpt("hope", n_embd=64, n_head=2).pe
    q, k = torch.randn(2, 2, 6, 32), torch.randn(2, 2, 9, 32)
    q_pos, k_pos = torch.arange(3, 9), torch.arange(9)
    a = rotate(pe, q, q_pos) @ rotate(pe, k, k_pos, key=True).transpose(-1, -2)
    b = rotate(pe, q, q_pos + shift) @ rotate(pe, k, k_pos + shift, key=True).transpose(-1, -2)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert 0 < pe.keep.sum() < 16                                  # some pairs frozen, some rotating


def test_every_pair_kept_is_rope():
    idx = torch.randint(0, 40, (2, 20))
    with torch.no_grad():
        plain = tiny_gpt("rope")(idx)[0]
        every = tiny_gpt("hope", hope_turns=1e-9)(idx)[0]
        default = tiny_gpt("hope")(idx)[0]
    assert torch.equal(every, plain)
    assert not torch.allclose(default, plain, rtol=0, atol=1e-5)


def test_the_cut_follows_the_training_length_and_is_kept():
    short, longer = tiny_gpt("hope", block_size=32).pe, tiny_gpt("hope", block_size=32, hope_length=2000).pe
    assert short.keep.sum() < longer.keep.sum()                    # at L = 2000 lower frequencies turn too
    assert positional.pin_lengths({"hope_length": 0, "rope_base": 1e4}, 32)["hope_length"] == 32
    with pytest.raises(ValueError, match="hope_turns must be > 0"):
        load_config(["configs/hope.py", "--hope_turns=0"])


def test_takes_the_frequency_methods():
    pe = tiny_gpt("hope", rope_scaling="linear", rope_factor=4.0).pe
    plain = tiny_gpt("hope").pe
    torch.testing.assert_close(pe.inv_freq, plain.inv_freq / 4)
    assert torch.equal(pe.keep, plain.keep) and math.isclose(pe.attention_scale, 1.0)   # the cut is RoPE's own
