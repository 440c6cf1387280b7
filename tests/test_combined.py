"""Combinations "a+b": each part through its hooks (positional/combined.py)."""
import pytest
import torch

import positional
from model import GPTConfig
from positional.base import Ctx
from tests.conftest import assert_decodes_like_a_recompute, tiny_gpt


def test_rope_plus_alibi_logits_are_ropes_plus_alibis_bias():
    model = tiny_gpt("rope+alibi")
    pe, rope, alibi = model.pe, positional.build(GPTConfig(n_head=4, n_embd=32, pos_encoding="rope")), \
        positional.build(GPTConfig(n_head=4, n_embd=32, pos_encoding="alibi"))
    q, k = torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)
    q_pos, k_pos = torch.arange(3, 10), torch.arange(3, 10)
    ctx = Ctx(q_pos, k_pos)
    got = pe.rotate(q, ctx) @ pe.rotate(k, ctx, key=True).transpose(-1, -2) + pe.dense_bias(q_pos, k_pos)
    want = rope.rotate(q, ctx) @ rope.rotate(k, ctx, key=True).transpose(-1, -2)
    slopes = torch.tensor([2.0 ** (-2 * (h + 1)) for h in range(4)])        # 2^(-8/4) ratio, 4 heads
    want = want - slopes[:, None, None] * (q_pos[:, None] - k_pos[None, :]).float()
    torch.testing.assert_close(got, want)
    assert pe.needs_score_matrix and not pe.overrides("attend") and pe.name == "rope+alibi"


def test_any_pair_and_its_settings_and_scaling():
    model = tiny_gpt("learned+t5", t5_num_buckets=8)
    assert model.pe.max_positions == 32 and model.pe.parts["t5"].num_buckets == 8
    assert model.get_num_params() == sum(p.numel() for p in model.parameters()) - 32 * 32   # wpe left out
    yarn = tiny_gpt("alibi+rope", rope_scaling="yarn", rope_factor=2.0, rope_base=500.0)
    assert yarn.pe.parts["rope"].method_label().startswith("yarn") and yarn.pe.parts["rope"].base == 500.0


@pytest.mark.parametrize("name, message", [
    ("rope+rope", "names an encoding twice"), ("rop+alibi", "did you mean 'rope'"),
    ("shaw+alibi", "shaw forms its own logits"), ("rope+none", "other than none")])
def test_bad_combinations_are_refused_in_one_line(name, message):
    with pytest.raises(ValueError, match=message):
        positional.resolve(name)


def test_a_setting_of_neither_part_is_refused():
    with pytest.raises(ValueError, match="t5_num_buckets is a setting of t5"):
        positional.resolve("rope+alibi", given={"t5_num_buckets": 8})


@pytest.mark.parametrize("name, kw", [("rope+alibi", {"layer_encodings": "rope+alibi,none"}), ("learned+t5", {}),
                                      ("sinusoidal+shaw", {}), ("xpos+kerple", {}), ("fox+rope", {})])
def test_combinations_cache_like_a_recompute(name, kw):
    assert_decodes_like_a_recompute(tiny_gpt(name, **kw), torch.randint(0, 40, (1, 12)), prefill=6, max_len=12)


def test_a_part_takes_the_scaling_the_registry_would_give_it_alone():
    """combined.takes_scaling (a part's rule, kept in combined.py: no import of the registry) agrees with
    positional.scaling_problem for every single encoding and rope_scaling."""
    from positional.combined import takes_scaling
    for name, cls in positional.REGISTRY.items():
        if "+" not in name:
            for method in positional.SCALINGS:
                assert takes_scaling(cls, method) == (positional.scaling_problem(name, method) is None), (name, method)
