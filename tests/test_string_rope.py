"""STRING (positional/string_rope.py): logits at the shifted relative positions worked out pair by pair, RoPE
exactly below the offset, invariance to shifting both positions, the KV cache equal to one forward, the
defaults from the training length, and bad settings in one line."""
import math

import pytest
import torch

from positional.base import Ctx
from positional.rope import RoPE
from positional.string_rope import STRING
from tests.conftest import assert_decodes_like_a_recompute, rotate, tiny_gpt
from training.config import ConfigError, load_config


def shifted(i, j, S, W):
    return i - j if i - j < S else i - j - S + W


def test_hand_computed_relative_positions():
    assert [shifted(i, 0, 6, 2) for i in range(10)] == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5]   # W..S-1 met twice


def test_logits_use_the_shifted_distances():
    S, W, D = 5, 2, 8
    pe, plain = STRING(D, base=16.0, offset=S, window=W), RoPE(D, base=16.0)
    q, k = torch.randn(1, 2, 12, D, dtype=torch.float64), torch.randn(1, 2, 12, D, dtype=torch.float64)
    pos = torch.arange(12)
    got = pe.logits(rotate(pe, q, pos), rotate(pe, k, pos, key=True), Ctx(pos, pos), layer=0)
    for i in range(12):
        for j in range(i + 1):
            rel = torch.tensor([float(shifted(i, j, S, W))])
            want = (plain.rotate_at(q[:, :, i:i + 1], rel) * k[:, :, j:j + 1]).sum(-1)[..., 0] / math.sqrt(D)
            torch.testing.assert_close(got[:, :, i, j], want, rtol=1e-5, atol=1e-6)   # float32 tables


@pytest.mark.parametrize("shift", [1, 37, 1000])
def test_logits_are_invariant_to_shifting_both_positions(shift):
    pe = STRING(8, offset=5, window=2)
    q, k = torch.randn(2, 4, 6, 8, dtype=torch.float64), torch.randn(2, 4, 14, 8, dtype=torch.float64)
    q_pos, k_pos = torch.arange(8, 14), torch.arange(14)
    a = pe.logits(q, k, Ctx(q_pos, k_pos), 0)
    b = pe.logits(q, k, Ctx(q_pos + shift, k_pos + shift), 0)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)   # float32 tables at positions past 1000


def test_rope_below_the_offset_shifted_past_it():
    idx = torch.randint(0, 40, (2, 24))
    with torch.no_grad():
        plain = tiny_gpt("rope")(idx)[0]
        same = tiny_gpt("rope", rope_scaling="string", string_offset=24, string_window=3)(idx)[0]
        moved = tiny_gpt("rope", rope_scaling="string", string_offset=6, string_window=2)(idx)[0]
    torch.testing.assert_close(same, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(moved[:, :6], plain[:, :6], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(moved[:, 8:], plain[:, 8:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("kw", [{}, dict(window=6, sinks=1)], ids=["full", "window"])
def test_kv_cache_matches_full_forward(kw):
    model = tiny_gpt("rope", block_size=16, rope_scaling="string", **kw)
    assert_decodes_like_a_recompute(model, torch.randint(0, 40, (2, 30)), prefill=5)


def test_defaults_follow_the_training_length():
    assert (tiny_gpt("rope", block_size=2048, rope_scaling="string").pe.offset,
            tiny_gpt("rope", block_size=2048, rope_scaling="string").pe.window) == (675, 128)   # the authors' README
    assert tiny_gpt("rope", block_size=32, rope_scaling="string").pe.method_label() == "string S10 W2"


def test_one_training_step():
    model = tiny_gpt("rope", rope_scaling="string").train()
    idx = torch.randint(0, 40, (2, 32))
    model(idx, idx)[1].backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("args, says", [
    (["--string_offset=4", "--string_window=4"], "STRING needs 0 < string_window < string_offset, got W = 4 and S = 4"),
    (["--string_offset=-1"], "string_offset must be >= 0"),
    (["--pos_encoding=alibi"], "rope_scaling='string' is defined for the rope encoding only; this model uses 'alibi'"),
])
def test_bad_settings_are_one_line(args, says):
    with pytest.raises(ConfigError) as e:
        load_config(["--rope_scaling=string", *args])
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("T, distance", [(50, 49), (85, 84 - 84 + 16), (4096, 4095 - 84 + 16)])
def test_effective_reach_is_the_largest_shifted_distance(T, distance):
    """L = 256: S = int(0.33 L) = 84, W = 16; the largest distance rotated is T - 1, or T - 1 - S + W past S."""
    from positional.rope_scaling.effective import effect
    got = effect("string", 4.0, 256, T, 32)
    assert got["reach"] == pytest.approx(distance / 255) and got["kept"] == 16 and got["scale"] == 1.0


def test_a_generation_writes_nothing_on_the_encoding():
    from tests.test_encodings import held
    model = tiny_gpt("rope", rope_scaling="string")
    before = held(model.pe)
    model.generate(torch.randint(0, 40, (1, 5)), 40, top_k=5, generator=torch.Generator().manual_seed(0))
    plain, tensors = held(model.pe)
    assert plain == before[0] and all(torch.equal(tensors[n], t) for n, t in before[1].items())
