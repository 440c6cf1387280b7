"""Per-layer settings (positional.variant_choice, attention/schedule.py): a layer_encodings entry "name@key=value@..."
is the encoding with settings or a rope_scaling of its own. Gemma 3's local/global RoPE (bases 10,000 and 1,000,000,
linear scaling in the global layers only) equals transformers' Gemma3RotaryEmbedding layer type by layer type; two
bases rotate differently; a variant keeps the model's other settings; mixed schedules decode like a recompute;
checkpoints keep the variants (configs/gemma3_local_global.py trained and reloaded); bad entries are refused in one
line."""
import dataclasses
import re

import pytest
import torch
from transformers.models.gemma3.configuration_gemma3 import Gemma3TextConfig
from transformers.models.gemma3.modeling_gemma3 import Gemma3RotaryEmbedding, apply_rotary_pos_emb

from model import GPT
from positional.base import Ctx
from tests.conftest import assert_decodes_like_a_recompute, tiny_gpt, trained
from training.config import model_config

GEMMA3 = "rope,rope,rope,rope,rope,rope@rope_base=1e6@rope_scaling=linear@rope_factor=8"   # 5 local : 1 global


def rotated(pe, x, pos):
    """pe.rotate of queries x (B, H, T, D) at positions pos."""
    return pe.rotate(x, Ctx(pos, pos))


def test_gemma3_local_and_global_rope_equal_transformers_per_layer_type():
    """Six layers as Gemma 3's: layer types sliding x5 then full; each layer's rotation of the same queries equals
    transformers' cos/sin of its type (rope_parameters per type: rope_scaling goes to the full layers only)."""
    hf_cfg = Gemma3TextConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=4, head_dim=8,
                              num_hidden_layers=6, vocab_size=40, intermediate_size=64, sliding_window=4,
                              rope_scaling={"rope_type": "linear", "factor": 8.0})
    hf = Gemma3RotaryEmbedding(hf_cfg)
    model = tiny_gpt("rope", n_layer=6, layer_encodings=GEMMA3, layer_windows="4,4,4,4,4,0")
    types = ["sliding_attention" if layer.window else "full_attention" for layer in model.schedule]
    assert types == hf_cfg.layer_types
    x, pos = torch.randn(2, 4, 40, 8), torch.arange(40)
    for layer, kind in zip(model.schedule, types):
        cos, sin = hf(x, pos[None], kind)                                          # (1, T, D)
        want, _ = apply_rotary_pos_emb(x, x, cos, sin)
        torch.testing.assert_close(rotated(model.encodings[layer.encoding], x, pos), want, rtol=1e-5, atol=1e-5)
    local, full = model.pe, model.pe_layers["rope@5"]
    assert (local.base, local.method_label(), full.base, full.method_label()) == (1e4, "", 1e6, "linear x8")


def test_two_layers_with_different_bases_rotate_differently_each_as_its_own_base():
    model = tiny_gpt("rope", layer_encodings="rope,rope@rope_base=500")
    x, pos = torch.randn(1, 4, 12, 8), torch.arange(12)
    a, b = rotated(model.pe, x, pos), rotated(model.pe_layers["rope@1"], x, pos)
    assert not torch.allclose(a, b)
    assert torch.equal(a, rotated(tiny_gpt("rope").pe, x, pos))
    assert torch.equal(b, rotated(tiny_gpt("rope", rope_base=500.0).pe, x, pos))
    assert torch.equal(a[..., :1, :], b[..., :1, :])                               # position 0: no rotation either


def test_a_variant_keeps_the_models_other_settings_and_the_model_its_own():
    model = tiny_gpt("rope", layer_encodings="rope,rope@rope_base=500", rotary_fraction=0.5, rope_base=100.0)
    main, variant = model.pe, model.pe_layers["rope@1"]
    assert (main.base, main.rotary_dim, variant.base, variant.rotary_dim) == (100.0, 4, 500.0, 4)
    assert model.config.pos_settings["rope_base"] == 100.0                         # the variant's value is its own


def test_layers_share_a_variant_and_the_label_shows_the_entries():
    model = tiny_gpt("rope", n_layer=4, layer_encodings="rope,rope@rope_base=1e6", layer_windows="8,0")
    assert [layer.encoding for layer in model.schedule] == ["rope", "rope@1", "rope", "rope@1"]
    assert list(model.pe_layers) == ["rope@1"] and model.pos_name == "rope/w8,rope@rope_base=1e6"
    assert len(set(model.schedule)) == 2                                           # two plans, as two encodings
    spaced = tiny_gpt("rope", layer_encodings="rope, rope @ rope_base = 1e6")
    assert list(spaced.pe_layers) == ["rope@1"] and spaced.pe_layers["rope@1"].base == 1e6


MIXED = [  # (pos_encoding, layer_encodings, layer_windows, extra keys)
    ("rope", "rope,rope,rope,rope@rope_base=1e6", "5,5,5,0", {}),                              # Gemma 3, 3:1
    ("rope", "rope,rope@rope_scaling=dynamic@rope_factor=2", "4,0", {}),      # keys re-rotated in the global layer only
    ("rope", "rope,rope@rope_scaling=yarn@rope_factor=4,none@nope_attn_scale=0.3@nope_floor_scale=3,t5", "", {}),
    ("t5", "t5,t5@t5_num_buckets=8,none", "", {}),                                             # learned tables
]


@pytest.mark.parametrize("pos, pattern, windows, extra", MIXED)
def test_mixed_variant_schedules_decode_like_a_recompute(pos, pattern, windows, extra):
    model = tiny_gpt(pos, n_layer=4, layer_encodings=pattern, layer_windows=windows, **extra)
    with torch.no_grad():
        for pe in model.encodings.values():
            for p in pe.parameters():
                p.normal_(0, 0.5)
    assert_decodes_like_a_recompute(model, torch.randint(0, 40, (2, 26)), prefill=5)


def test_a_variant_with_its_own_parameters_survives_a_state_dict_round_trip():
    model = tiny_gpt("t5", layer_encodings="t5,t5@t5_num_buckets=8")
    with torch.no_grad():
        model.pe_layers["t5@1"].table.weight.normal_(0, 0.5)
    again = GPT(model_config(dataclasses.asdict(model.config))).eval()
    again.load_state_dict(model.state_dict())
    assert again.pe_layers["t5@1"].table.weight.shape[0] == 8 and model.pe.table.weight.shape[0] == 32
    idx = torch.randint(0, 40, (2, 20))
    with torch.no_grad():
        assert torch.equal(again(idx)[0], model(idx)[0])


def test_the_gemma3_config_trains_and_its_checkpoint_keeps_the_per_layer_bases(tiny_data, tmp_path):
    model, ckpt, stdout = trained("gemma3_local_global", tiny_data, tmp_path, "--n_layer=4")
    assert ckpt["model_args"]["layer_encodings"] == "rope,rope,rope,rope@rope_base=1e6"
    assert model.pos_name in stdout and model.pos_name == "rope/w32,rope/w32,rope/w32,rope@rope_base=1e6"
    assert (model.pe.base, model.pe_layers["rope@3"].base) == (10000.0, 1e6)


@pytest.mark.parametrize("pattern, message", [
    ("rope,rope@", "layer_encodings entry 'rope@' must be name@key=value, each key once (e.g. rope@rope_base=1e6)"),
    ("rope,rope@rope_base", "entry 'rope@rope_base' must be name@key=value"),
    ("rope,rope@rope_base=1@rope_base=2", "must be name@key=value, each key once"),
    ("rope,rope@t5_num_buckets=8", "entry 'rope@t5_num_buckets=8': t5_num_buckets is not a setting of rope; its "
                                   "settings: rope_base, rotary_fraction, rope_scaling"),
    ("rope,rope@rope_factor=4", "rope_factor is not a setting of rope; its settings"),    # no scaling, no factor
    ("rope,rope@rope_base=big", "entry 'rope@rope_base=big': rope_base takes a number, got 'big'"),
    ("rope,t5@t5_num_buckets=8.5", "t5_num_buckets takes an integer, got '8.5'"),
    ("rope,rope@rope_scaling=yarm", "entry 'rope@rope_scaling=yarm': unknown rope_scaling 'yarm'; did you mean"),
    ("rope,alibi@rope_scaling=yarn", "entry 'alibi@rope_scaling=yarn': rope_scaling='yarn' needs a rotary encoding"),
    ("rope,ropey@rope_base=5", "unknown encoding 'ropey' in layer_encodings='rope,ropey@rope_base=5'"),
    ("rope@rope_base=5,none", "does not use pos_encoding='rope', the model's main encoding; set --pos_encoding to one "
                              "of the pattern's plain entries"),
    ("rope,rope@rope_base=0.5", "rope_base must be > 1, got 0.5"),                       # the settings' own bounds
])
def test_bad_variants_are_refused_in_one_line(pattern, message):
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        tiny_gpt("rope", layer_encodings=pattern)
    assert "\n" not in str(e.value)
