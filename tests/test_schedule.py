"""Per-layer schedules (attention/schedule.py): layer_encodings and layer_windows. A uniform schedule is
bitwise the plain model; mixed ones decode with their per-layer caches exactly like a recompute;
layers sharing (encoding, window) share one plan and one bias; capabilities combine."""
import re

import pytest
import torch

from model import KVCache
from training.config import ConfigError, model_config
from model import GPT, CausalSelfAttention
from tests.conftest import TINY_ARGS, tiny_gpt, trained
from tests.inproc import train_error


# ---- a uniform schedule is the plain model ----------------------------------------------------
@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "learned", "fox", "cope", "shaw"])
def test_every_layer_the_same_encoding_is_bitwise_the_plain_model(name):
    idx = torch.randint(0, 40, (2, 24))
    plain, sched = tiny_gpt(name), tiny_gpt(name, layer_encodings=f"{name},{name}")
    a, b = dict(plain.named_parameters()), dict(sched.named_parameters())
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    assert sched.pe_layers is None and sched.pos_name == plain.pos_name == name
    with torch.no_grad():
        assert torch.equal(plain(idx)[0], sched(idx)[0])


def test_every_layer_the_same_window_is_bitwise_window():
    idx = torch.randint(0, 40, (2, 24))
    plain, sched = tiny_gpt("alibi", window=5, sinks=1), tiny_gpt("alibi", layer_windows="5", sinks=1)
    with torch.no_grad():
        assert torch.equal(plain(idx)[0], sched(idx)[0])
        assert sched.setup_cache(2, 0).period == 5 - 1 + 16   # a ring
        steps = [sched(idx[:, :3])[0]] + [sched(idx[:, t:t + 1])[0] for t in range(3, 24)]
    assert torch.equal(torch.cat(steps, 1), torch.cat([plain.setup_cache(2, 0) and plain(idx[:, :3])[0]] +
                                                     [plain(idx[:, t:t + 1])[0] for t in range(3, 24)], 1))


# ---- mixed schedules: cached decoding == recompute ----------------------------------------------
MIXED = [  # (layer_encodings, layer_windows, extra keys)
    ("rope,rope,rope,none", "", {}),                       # Llama 4
    ("rope,none", "4,0", {}),                              # RNoPE-SWA
    ("", "4,4,4,0", {"sinks": 2}),                         # local/global
    ("alibi,rope,t5,none", "5,0", {}),
    ("rope,fox", "0,4", {}),
    ("xpos,shaw,rope,cope", "3,0,3,0", {}),
    ("cope,cope", "3,0", {"sinks": 1}),                     # CoPE counts inside each layer's own window
    ("rope,none", "", {"rope_scaling": "dynamic", "rope_factor": 2.0}),   # keys re-rotated in the rope layers
]


@pytest.mark.parametrize("pattern,windows,extra", MIXED)
def test_mixed_schedule_decodes_like_a_recompute(pattern, windows, extra):
    model = tiny_gpt(pattern.split(",")[0] if pattern else "rope", n_layer=4, layer_encodings=pattern,
                     layer_windows=windows, **extra)
    for pe in model.encodings.values():
        with torch.no_grad():
            for p in pe.parameters():
                p.normal_(0, 0.5)
    idx = torch.randint(0, 40, (2, 26))
    with torch.no_grad():
        full = model(idx)[0]
        cache = model.setup_cache(2, 32)
        steps = [model(idx[:, :5])[0]] + [model(idx[:, t:t + 1])[0] for t in range(5, 26)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
    if windows:   # different windows: one slot per position, the windows acting through the mask
        assert isinstance(cache, KVCache) and cache.period == 0 and cache.size == 33


def test_layers_sharing_encoding_and_window_share_one_plan_and_bias(monkeypatch):
    """(alibi, 4) (none, 4) (alibi, 0) (none, 0): two plans per encoding; alibi's bias is computed
    once for both windows, with a cache too (one cache: every layer attends to the same slots)."""
    model = tiny_gpt("alibi", n_layer=8, layer_encodings="alibi,none", layer_windows="4,4,0,0")
    calls, plans = [], []
    real_bias = type(model.pe).dense_bias
    monkeypatch.setattr(type(model.pe), "dense_bias", lambda s, q, k: calls.append(len(k)) or real_bias(s, q, k))
    real_attn = CausalSelfAttention.forward
    monkeypatch.setattr(CausalSelfAttention, "forward",
                        lambda s, x, pe, plan: plans.append((id(pe), id(plan))) or real_attn(s, x, pe, plan))
    idx = torch.randint(0, 40, (1, 12))
    with torch.no_grad():
        model(idx)
        assert len(calls) == 1 and len(set(plans)) == 4 and plans[:4] == plans[4:]
        assert len({pe for pe, _ in plans}) == 2                   # each encoding built once
        model.setup_cache(1, 16)
        model(idx[:, :10])
        calls.clear()
        model(idx[:, 10:11])
    assert calls == [11]                                          # one slot per position: 10 cached + 1 new


# ---- settings, capabilities, refusals -----------------------------------------------------------
def test_settings_of_every_encoding_in_the_pattern_are_in_play():
    model = tiny_gpt("rope", layer_encodings="rope,t5", t5_num_buckets=8, rope_base=500.0)
    assert model.pe_layers["t5"].table.weight.shape[0] == 8 and model.pe.inv_freq[1] == 500.0 ** (-2 / 8)
    assert model.config.pos_settings["t5_num_buckets"] == 8 and model.config.pos_settings["rope_base"] == 500.0
    with pytest.raises(ConfigError, match="kerple_variant is a setting of kerple"):
        tiny_gpt("rope", layer_encodings="rope,t5", kerple_variant="power")


def test_rope_scaling_applies_to_the_rotary_layers_only():
    model = tiny_gpt("rope", layer_encodings="rope,alibi", rope_scaling="yarn", rope_factor=4.0)
    assert model.pe.method_label() and not model.pe_layers["alibi"].method_label()


def test_capabilities_combine_the_layers_encodings():
    xpos = tiny_gpt("xpos")
    mixed = tiny_gpt("alibi", n_layer=4, layer_encodings="alibi,xpos")
    assert mixed.pe.max_positions is None and mixed.max_positions == xpos.max_positions is not None
    learned = tiny_gpt("learned", layer_encodings="learned")
    assert learned.max_positions == 32 and learned.excluded_param_names == ["pe.wpe.weight"]
    assert learned.get_num_params() == tiny_gpt("learned").get_num_params()
    assert tiny_gpt("rope", n_layer=4, layer_encodings="rope,none", layer_windows="8,0").pos_name == "rope/w8,none"
    with pytest.raises(ValueError, match="the xpos/w8,alibi encoding knows 28231 positions"):
        tiny_gpt("alibi", layer_encodings="xpos,alibi", layer_windows="8,0", xpos_scale_base=512.0)(
            torch.zeros(1, 28232, dtype=torch.long))


def test_task_scoring_asks_the_model_for_its_position_limit():
    """tasks/score.py once asked the main encoding: rope,xpos claimed unlimited positions (rope's)."""
    from tasks.score import fits
    model = tiny_gpt("rope", layer_encodings="rope,xpos", xpos_scale_base=512.0)
    limit = model.max_positions
    assert model.pe.max_positions is None and limit is not None
    assert fits(model, limit + 1) and not fits(model, limit + 2)


@pytest.mark.parametrize("keys,message", [
    (dict(layer_encodings="rope,alibj"),
     "unknown encoding 'alibj' in layer_encodings='rope,alibj'; did you mean 'alibi'?"),
    (dict(layer_encodings="rope,none,none"), "layer_encodings='rope,none,none' must be 1 to n_layer=2"),
    (dict(layer_encodings="rope,"), "unknown encoding '' in layer_encodings='rope,'"),
    (dict(layer_windows="8,"), "layer_windows='8,' must be 1 to n_layer=2 comma-separated entries"),
    (dict(layer_encodings="alibi,none"), "does not use pos_encoding='rope'"),
    (dict(layer_windows="8,x"), "each entry must be a whole number of tokens >= 0"),
    (dict(layer_windows="8,-1"), "windows must be >= 0"),
    (dict(layer_windows="8,0", window=4), "window=4 and layer_windows='8,0' both set the windows"),
    (dict(layer_encodings="rope,learned"), "the learned encoding acts on the token embeddings"),
    (dict(layer_windows="8,0", attention="linear"), "linear attention has no window"),
    (dict(layer_encodings="rope,alibi", attention="linear"), "the alibi encoding acts on the attention score matrix"),
])
def test_bad_schedules_are_refused_in_one_line(keys, message):
    keys = dict(keys)
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        tiny_gpt(keys.pop("pos_encoding", "rope"), **keys)
    assert "\n" not in str(e.value)


def test_train_refuses_a_bad_pattern_before_anything_is_written(tiny_data, tmp_path, capsys):
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}",
                       "--layer_encodings=rope,alibi,none"], capsys)
    assert "layer_encodings='rope,alibi,none' must be 1 to n_layer=1" in err and not list(tmp_path.iterdir())


# ---- training smoke -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("config", ["llama4_nope", "rnope", "local_global"])
def test_scheduled_configs_train_and_reload(tiny_data, tmp_path, config):
    model, ckpt, stdout = trained(config, tiny_data, tmp_path, "--n_layer=4")
    assert model.pos_name in stdout and model.schedule == GPT(model_config(ckpt["model_args"])).schedule
    assert len({layer for layer in model.schedule}) > 1
