"""The public formulas of positional/ against values computed by hand from the papers."""
import math

import pytest
import torch

from positional.alibi import alibi_slopes
from positional.rope import rope_inv_freq
from positional.sinusoidal import sinusoidal_table
from positional.t5 import relative_position_bucket
from positional.xpos import xpos_scale


def test_alibi_slopes_power_of_two():
    # paper: 8 heads -> 1/2, 1/4, ..., 1/256
    assert torch.allclose(alibi_slopes(8), torch.tensor([2.0 ** -k for k in range(1, 9)]))
    # 4 heads: start 2^(-8/4) = 1/4, ratio 1/4
    assert torch.allclose(alibi_slopes(4), torch.tensor([1 / 4, 1 / 16, 1 / 64, 1 / 256]))


def test_alibi_slopes_not_power_of_two():
    # 6 heads: the 4-head slopes, then every other slope of the 8-head sequence: 1/2, 1/8
    want = [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8]
    assert torch.allclose(alibi_slopes(6), torch.tensor(want))
    assert alibi_slopes(12).shape == (12,) and len(set(alibi_slopes(12).tolist())) == 12


def test_t5_causal_buckets_by_hand():
    # 32 buckets, max_distance 128, causal: 16 exact buckets, then 16 log-spaced up to 128
    rel = torch.tensor([0, -1, -5, -15, -16, -32, -64, -127, -128, -1000, 3])
    want = [0, 1, 5, 15, 16, 16 + math.floor(16 / 3), 16 + math.floor(32 / 3), 31, 31, 31, 0]
    got = relative_position_bucket(rel, num_buckets=32, max_distance=128)
    assert got.tolist() == want


def test_t5_buckets_monotone_and_bounded():
    rel = -torch.arange(0, 5000)
    b = relative_position_bucket(rel, num_buckets=32, max_distance=128)
    assert (b[1:] >= b[:-1]).all() and b.min() == 0 and b.max() == 31


def test_sinusoidal_table_by_hand():
    t = sinusoidal_table(3, 4)
    # dim 4: frequencies 1 and 1/100 (10000^(2/4) = 100); even columns sin, odd cos
    for pos in range(3):
        want = [math.sin(pos), math.cos(pos), math.sin(pos / 100), math.cos(pos / 100)]
        assert torch.allclose(t[pos], torch.tensor(want), atol=1e-7)
    assert sinusoidal_table(5, 7).shape == (5, 7)


def test_rope_inv_freq_by_hand():
    inv, scale = rope_inv_freq(4)
    assert torch.allclose(inv.float(), torch.tensor([1.0, 0.01])) and scale == 1.0
    assert torch.allclose(rope_inv_freq(8, 16.0)[0].float(), torch.tensor([1.0, 0.5, 0.25, 0.125]))


def test_xpos_scale_by_hand():
    z = torch.tensor([0.4 / 1.4, 0.9 / 1.4])  # zeta_j = (2j/d + 0.4) / 1.4 for d = 4
    s = xpos_scale(torch.tensor([0, 512, 1024]), 4, scale_base=512)
    assert torch.allclose(s, torch.stack([torch.ones(2), z, z ** 2]))
