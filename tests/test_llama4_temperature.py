"""Llama 4's attention temperature tuning (positional/nope.py: settings nope_attn_scale, nope_floor_scale of the none
encoding): the scale by hand at Llama 4's values; one NoPE layer equal to transformers' own Llama4TextAttention (a
tiny config built here, no hub) with the same weights, at positions across several floors, with and without the
temperature; in a schedule, the NoPE layers scaled and the RoPE ones untouched; cached decoding equal to recompute;
bad values refused in one line."""
import math
import re

import pytest
import torch
from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

from positional.nope import llama4_scale
from tests.conftest import assert_decodes_like_a_recompute, tiny_gpt


def test_scale_by_hand_at_llama4_values():
    """1 + 0.1 log(1 + floor((n + 1) / 8192)): 1 up to position 8190, then steps at each multiple of 8192."""
    pos = torch.tensor([0, 8190, 8191, 16382, 16383, 8 * 8192 - 1, 10 ** 6])
    floors = [0, 0, 1, 1, 2, 8, 122]                                    # floor((n + 1) / 8192); 1000001 / 8192 = 122.07
    want = [1 + 0.1 * math.log(1 + f) for f in floors]
    got = llama4_scale(pos, 0.1, 8192)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.tensor(want), rtol=1e-6, atol=0)


def hf_attention(attn_scale, floor_scale, tuning=True):
    """transformers' Llama 4 attention of a one-layer NoPE model (no_rope_layers=[0]: no RoPE, no qk-norm there)."""
    cfg = Llama4TextConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, head_dim=8,
                           num_hidden_layers=1, no_rope_layers=[0], attn_temperature_tuning=tuning,
                           floor_scale=floor_scale, attn_scale=attn_scale, vocab_size=40, intermediate_size=64,
                           intermediate_size_mlp=64)
    cfg._attn_implementation = "eager"
    return Llama4TextAttention(cfg, 0).eval()


def posgpt_like(hf, attn_scale, floor_scale):
    """(one-layer NoPE GPT, its attention) with hf's weights: c_attn = [q; k; v] rows, c_proj = o_proj."""
    model = tiny_gpt("none", n_layer=1, nope_attn_scale=attn_scale, nope_floor_scale=floor_scale)
    attn = model.h[0].attn
    with torch.no_grad():
        attn.c_attn.weight.copy_(torch.cat([hf.q_proj.weight, hf.k_proj.weight, hf.v_proj.weight]))
        attn.c_proj.weight.copy_(hf.o_proj.weight)
    return model, attn


@pytest.mark.parametrize("attn_scale, floor_scale, tuning", [(0.3, 4, True), (0.1, 3, True), (0.3, 4, False)])
def test_a_nope_layer_equals_transformers_llama4_attention(attn_scale, floor_scale, tuning):
    """Positions 0..19 cross five floors of 4 (six of 3): transformers' layer output, ours, to float32 rounding;
    and the temperature changes it (so the comparison can fail)."""
    torch.manual_seed(0)
    hf = hf_attention(attn_scale, floor_scale, tuning)
    model, attn = posgpt_like(hf, attn_scale if tuning else 0.0, floor_scale)
    x, pos = torch.randn(2, 20, 32), torch.arange(20)
    causal = torch.full((20, 20), float("-inf")).triu(1)[None, None]                 # (1, 1, T, T) additive
    with torch.no_grad():
        want = hf(x, None, causal)[0]
        got = attn(x, model.pe, model.plans(pos, None, model.encodings)[model.schedule[0]])
        plain = hf_attention(attn_scale, floor_scale, tuning=False)
        plain.load_state_dict(hf.state_dict())
        untempered = plain(x, None, causal)[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert torch.equal(want[:, :floor_scale - 1], untempered[:, :floor_scale - 1])   # 1 before the first floor
    assert (want - untempered).abs().max() > 1e-3 if tuning else torch.equal(want, untempered)


def layer_outputs(model, idx):
    """[each block's output (B, T, C)] of a forward."""
    outs = []
    hooks = [b.register_forward_hook(lambda m, i, o: outs.append(o)) for b in model.h]
    with torch.no_grad():
        model(idx)
    for h in hooks:
        h.remove()
    return outs


def test_in_a_schedule_only_the_nope_layers_are_scaled():
    """rope,none: the RoPE layer's output is the untempered model's bit for bit, the NoPE layer's is not."""
    idx = torch.randint(0, 40, (2, 24))
    keys = dict(n_layer=2, layer_encodings="rope,none", nope_floor_scale=4)
    plain, tempered = tiny_gpt("rope", **keys), tiny_gpt("rope", nope_attn_scale=0.5, **keys)
    (rope_a, nope_a), (rope_b, nope_b) = layer_outputs(plain, idx), layer_outputs(tempered, idx)
    assert torch.equal(rope_a, rope_b) and not torch.allclose(nope_a, nope_b)
    assert tempered.pe_layers["none"].attn_scale == 0.5 and not hasattr(tempered.pe, "attn_scale")


def test_off_by_default_bitwise_the_plain_none_encoding():
    idx = torch.randint(0, 40, (2, 24))
    a, b = tiny_gpt("none"), tiny_gpt("none", nope_attn_scale=0.0)
    with torch.no_grad():
        assert torch.equal(a(idx)[0], b(idx)[0])
    assert not type(a.pe).overrides("rotate")   # off: NoPE's own hooks, so its family and kernels stay NoPE's


@pytest.mark.parametrize("keys", [dict(pos="none"), dict(pos="rope", layer_encodings="rope,rope,rope,none", n_layer=4,
                                                         layer_windows="6,6,6,0")])
def test_cached_decoding_equals_recompute_across_floors(keys):
    keys = dict(keys)
    model = tiny_gpt(keys.pop("pos"), nope_attn_scale=0.4, nope_floor_scale=3, **keys)
    assert_decodes_like_a_recompute(model, torch.randint(0, 40, (2, 26)), prefill=5)


@pytest.mark.parametrize("keys, message", [
    (dict(nope_attn_scale=-0.1), "nope_attn_scale must be >= 0 (0: off; Llama 4: 0.1), got -0.1"),
    (dict(nope_floor_scale=0), "nope_floor_scale must be >= 1, got 0"),
    (dict(nope_attn_scale=0.1, attention="linear"), "nope_attn_scale=0.1 is a temperature of softmax attention"),
])
def test_bad_values_are_refused_in_one_line(keys, message):
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        tiny_gpt("none", **keys)
    assert "\n" not in str(e.value)


def test_a_rope_only_model_refuses_the_setting():
    """Not in play without a NoPE layer: the one line says whose setting it is."""
    with pytest.raises(ValueError, match=re.escape("nope_attn_scale is a setting of none; this run uses rope")):
        tiny_gpt("rope", nope_attn_scale=0.1)


def test_the_temperature_is_an_evaluation_time_key(tmp_path):
    """A NoPE checkpoint evaluated with Llama 4's temperature (as with log-n scaling, nothing trained changes): the
    same weights, logits equal up to the first floor and different past it; a trained key is still refused."""
    from training import checkpoint
    from training.config import ConfigError, eval_key
    model = tiny_gpt("none", n_layer=2, block_size=16)
    ckpt = dict(model_args=dict(vars(model.config)), model=model.state_dict())
    overrides = {k: eval_key(k, v) for k, v in (("nope_attn_scale", 0.5), ("nope_floor_scale", 4))}
    tempered = checkpoint.build_model(ckpt, overrides)
    idx = torch.randint(0, 40, (1, 12))
    with torch.no_grad():
        plain, warm = model.eval()(idx)[0], tempered(idx)[0]
    torch.testing.assert_close(warm[:, :3], plain[:, :3], rtol=0, atol=0)   # floor((n + 1) / 4) = 0 for n < 3
    assert not torch.allclose(warm[:, 3:], plain[:, 3:])
    with pytest.raises(ConfigError, match="evaluation-time keys apply here"):
        eval_key("n_embd", "64")
