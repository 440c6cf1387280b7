"""YaRN and NTK-by-parts against Hugging Face's formula (`_compute_yarn_parameters`,
transformers modeling_rope_utils.py, read for this test) written out below in plain
Python, against values worked by hand, and the HF-style scaling dict."""
import math

import pytest
import torch

from positional.rope_scaling.hf import from_hf
from positional.rope_scaling.ntk_by_parts import NTKByPartsSettings, ntk_by_parts
from positional.rope_scaling.yarn import YarnSettings, yarn


def theta(dim, base):
    return base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)


def reference(dim, base, L, s, beta_fast=32.0, beta_slow=1.0, truncate=True):
    """HF's steps, one pair at a time, in float64 Python floats."""
    def d(b):
        return dim * math.log(L / (b * 2 * math.pi)) / (2 * math.log(base))
    low, high = d(beta_fast), d(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    high = high + 0.001 if high == low else high
    out = []
    for j in range(dim // 2):
        pos_freq = base ** (2 * j / dim)
        extrapolation_factor = 1 - min(max((j - low) / (high - low), 0.0), 1.0)
        out.append(1 / (s * pos_freq) * (1 - extrapolation_factor) + 1 / pos_freq * extrapolation_factor)
    return torch.tensor(out, dtype=torch.float64)


def run(dim, base, L, s, **kw):
    return yarn(theta(dim, base), YarnSettings(rope_factor=s, rope_original_max_position=L, **kw), base=base)


def test_issue_example():
    """D = 32, base 1e4, L = 256, s = 4 (issue #11): d(32) = 0.42 -> 0, d(1) = 6.44 -> 7, so
    theta'_j = theta_j (1 - j/7 + j/28) for j <= 7 and theta_j / 4 after."""
    got, m = run(32, 1e4, 256, 4.0)
    torch.testing.assert_close(got[:6], torch.tensor([1.0, 0.5020905, 0.2484647, 0.1206690, 0.0571429, 0.0261087],
                                                     dtype=torch.float64), rtol=0, atol=5e-8)
    j = torch.arange(16, dtype=torch.float64)
    r = (j / 7).clamp(max=1)
    torch.testing.assert_close(got, theta(32, 1e4) * (1 - r + r / 4), rtol=1e-14, atol=0)
    assert m == pytest.approx(0.1 * math.log(4) + 1)


def test_short_original_length_keeps_the_fastest_pair():
    """L = 64: floor(d(32)) = floor(-1.99) = -2 clamps to 0, so pair 0 keeps theta_0 = 1; the
    paper's turns ramp gives pair 0 gamma = (64/(2 pi) - 1)/31 and so 0.472."""
    got, _ = run(32, 1e4, 64, 4.0)
    assert got[0].item() == 1.0
    turns, _ = run(32, 1e4, 64, 4.0, rope_ramp="turns")
    g = (64 / (2 * math.pi) - 1) / 31
    assert turns[0].item() == pytest.approx(g + (1 - g) / 4, rel=1e-12)
    assert turns[0].item() == pytest.approx(0.472, abs=1e-3)


# D = 8, base 16: d(beta) = log2(L / (2 pi beta)); with L = 2 pi 2^7.5, d(32) = 2.5, d(1) = 7.5
L_CLAMP = 2 * math.pi * 2 ** 7.5


@pytest.mark.parametrize("truncate, ramp", [
    (True, [0, 0, 0, 1 / 5]),            # low = 2, high = ceil(7.5) = 8 clamped to D - 1 = 7: (j - 2)/5
    (False, [0, 0, 0, 0.5 / 4.5]),       # low = 2.5, high = 7.5 clamped to 7: (j - 2.5)/4.5
])
def test_truncate_and_clamp_by_hand(truncate, ramp):
    got, _ = run(8, 16.0, L_CLAMP, 2.0, rope_truncate=truncate)
    r = torch.tensor(ramp, dtype=torch.float64)
    torch.testing.assert_close(got, theta(8, 16.0) * (1 - r) + theta(8, 16.0) / 2 * r, rtol=1e-14, atol=0)


@pytest.mark.parametrize("dim, base, L, s", [(32, 1e4, 256, 4.0), (32, 1e4, 64, 4.0), (64, 1e4, 2048, 8.0),
                                             (128, 5e5, 8192, 16.0), (16, 500.0, 100, 2.5), (8, 16.0, 4096, 3.0)])
@pytest.mark.parametrize("truncate", [True, False])
def test_matches_hf_formula(dim, base, L, s, truncate):
    got, _ = run(dim, base, L, s, rope_truncate=truncate)
    torch.testing.assert_close(got, reference(dim, base, L, s, truncate=truncate), rtol=1e-13, atol=0)
    by_parts, m = ntk_by_parts(theta(dim, base), NTKByPartsSettings(rope_factor=s, rope_original_max_position=L,
                                                                    rope_truncate=truncate), base=base)
    assert torch.equal(by_parts, got) and m == 1.0


def test_turns_ramp_differs_from_index_ramp():
    index, _ = run(32, 1e4, 256, 4.0)
    turns, _ = run(32, 1e4, 256, 4.0, rope_ramp="turns")
    # today's values in the issue: 1.0, 0.4386967, 0.1699797, 0.0713263, 0.0324380, 0.0158152
    torch.testing.assert_close(turns[:6], torch.tensor([1.0, 0.4386967, 0.1699797, 0.0713263, 0.0324380, 0.0158152],
                                                       dtype=torch.float64), rtol=0, atol=5e-8)
    assert (index[2] / turns[2]).item() == pytest.approx(0.2484647 / 0.1699797, rel=1e-6)


@pytest.mark.parametrize("kw, want", [
    ({}, 0.1 * math.log(4) + 1),
    ({"rope_attention_factor": 1.5}, 1.5),                                       # as given, whatever s
    ({"rope_mscale": 0.707, "rope_mscale_all_dim": 0.707}, 1.0),                 # DeepSeek-V3's pair
    ({"rope_mscale": 1.0, "rope_mscale_all_dim": 0.5}, (0.1 * math.log(4) + 1) / (0.05 * math.log(4) + 1)),
    ({"rope_mscale": 2.0}, 0.1 * math.log(4) + 1),                               # one alone: ignored, as in HF
])
def test_attention_scale(kw, want):
    _, m = run(32, 1e4, 256, 4.0, **kw)
    assert m == pytest.approx(want, rel=1e-12)


def test_no_temperature_without_extension():
    assert run(32, 1e4, 256, 1.0)[1] == 1.0 and run(32, 1e4, 256, 0.5, rope_mscale=1, rope_mscale_all_dim=2)[1] == 1.0


@pytest.mark.parametrize("kw, match", [
    ({"rope_ramp": "turn"}, "rope_ramp must be one of index, turns, got 'turn'"),
    ({"rope_beta_fast": 1.0, "rope_beta_slow": 2.0}, "need rope_beta_fast > rope_beta_slow > 0"),
    ({"rope_beta_slow": 0.0}, "need rope_beta_fast > rope_beta_slow > 0"),
    ({"rope_attention_factor": -1.0}, "rope_attention_factor must be >= 0"),
    ({"rope_factor": 0.0}, "rope_factor must be > 0"),
])
def test_bad_settings_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        YarnSettings(**{"rope_factor": 4.0, **kw}).check(None)


# ---- HF-style dicts -------------------------------------------------------------------
def flat_run(method, flat, dim=32, base=1e4):
    cls, fn = {"yarn": (YarnSettings, yarn), "ntk_by_parts": (NTKByPartsSettings, ntk_by_parts)}[method]
    return fn(theta(dim, base), cls(**flat), base=base)


def test_hf_dict_gives_the_flat_keys_frequencies():
    d = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "beta_fast": 32,
         "beta_slow": 1, "attention_factor": None, "mscale": 1.0, "mscale_all_dim": 0.5, "truncate": False}
    method, flat = from_hf(d)
    assert method == "yarn"
    assert flat == {"rope_factor": 4.0, "rope_original_max_position": 256, "rope_beta_fast": 32, "rope_beta_slow": 1,
                    "rope_mscale": 1.0, "rope_mscale_all_dim": 0.5, "rope_truncate": False}
    got, m = flat_run(method, flat)
    want, want_m = run(32, 1e4, 256, 4.0, rope_mscale=1.0, rope_mscale_all_dim=0.5, rope_truncate=False)
    assert torch.equal(got, want) and m == want_m


def test_hf_older_type_key_and_v5_keys():
    method, flat = from_hf({"type": "ntk_by_parts", "factor": 2, "original_max_position_embeddings": 64,
                            "rope_theta": 5e5, "partial_rotary_factor": 0.5})
    assert method == "ntk_by_parts" and flat == {"rope_factor": 2, "rope_original_max_position": 64,
                                                 "rope_base": 5e5, "rotary_fraction": 0.5}
    assert from_hf({"rope_type": "default"}) == ("", {})
    assert from_hf({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8192})[1]["rope_high_freq_factor"] == 4.0


@pytest.mark.parametrize("d, match", [
    ({"rope_type": "mrope", "factor": 4.0}, "unsupported rope_type 'mrope' in the rope_scaling dict; valid: default"),
    ({"factor": 4.0}, "needs a 'rope_type'"),
    ({"rope_type": "yarn", "type": "linear", "factor": 4.0}, "rope_type='yarn' and type='linear'"),
    ({"rope_type": "linear", "factor": 4.0, "beta_fast": 32}, "unknown key 'beta_fast' for rope_type 'linear'"),
    ({"rope_type": "yarn", "original_max_position_embeddings": 256}, "rope_type 'yarn' needs a 'factor'"),
    ("yarn", "a rope_scaling dict is expected"),
])
def test_hf_dict_errors_are_one_line(d, match):
    with pytest.raises(ValueError, match=match) as e:
        from_hf(d)
    assert "\n" not in str(e.value)


# ---- checkpoints written before the index ramp ------------------------------------------
def test_older_checkpoints_keep_the_turns_ramp():
    """A yarn checkpoint saved before rope_ramp existed (old flat form, or pos_settings without
    the key) was made with the turns ramp and keeps it; today's checkpoints keep what they say."""
    from training.config import load_config, upgrade_model_args
    today = load_config(["configs/rope.py", "--rope_scaling=yarn", "--rope_factor=4"]).model_args()
    assert today["pos_settings"]["rope_ramp"] == "index"
    assert upgrade_model_args(today)["pos_settings"]["rope_ramp"] == "index"
    unkeyed = {**today, "pos_settings": {k: v for k, v in today["pos_settings"].items() if k != "rope_ramp"}}
    assert upgrade_model_args(unkeyed)["pos_settings"]["rope_ramp"] == "turns"
    flat = {k: v for k, v in today.items() if k != "pos_settings"}
    flat.update(rope_factor=4.0, rope_beta_fast=32.0, rope_beta_slow=1.0, rope_base=10000.0)
    assert upgrade_model_args(flat)["pos_settings"]["rope_ramp"] == "turns"
    plain = {k: v for k, v in flat.items() if k != "rope_factor"} | {"rope_scaling": ""}
    assert "rope_ramp" not in upgrade_model_args(plain)["pos_settings"]


def test_hf_dict_on_the_command_line():
    from training.config import ConfigError, load_config
    cfg = load_config(["configs/rope.py", "--rope_scaling={'rope_type': 'yarn', 'factor': 4, 'beta_fast': 16, "
                                          "'original_max_position_embeddings': 128, 'attention_factor': None}"])
    assert cfg.rope_scaling == "yarn"
    s = cfg.pos_settings
    assert (s["rope_factor"], s["rope_beta_fast"], s["rope_original_max_position"], s["rope_ramp"]) == (4.0, 16.0, 128,
                                                                                                       "index")
    assert isinstance(s["rope_factor"], float)
    with pytest.raises(ConfigError, match="config key 'rope_truncate' wants True or False"):
        load_config(["configs/rope.py", "--rope_scaling={'rope_type': 'yarn', 'factor': 4, 'truncate': 'yes'}"])


@pytest.mark.slow
def test_hf_dict_in_evaluate(tiny_run, tiny_data, tmp_path):
    """The dict's settings reach the model: the same losses as the flat keys, not those of
    yarn's defaults (head dim 16, L = 16: d(0.1) = 2.81, so truncate changes pair 1's ramp)."""
    import evaluate
    common = [str(tiny_run), f"--data_dir={tiny_data}", f"--report_dir={tmp_path}", "--overwrite=True",
              "--lengths=16,32", "--tokens_per_point=64", "--device=cpu"]
    rows = evaluate.main(common + ["--rope_scaling={'rope_type': 'yarn', 'factor': 2, 'beta_slow': 0.1, "
                                   "'truncate': False, 'attention_factor': 1.3}"])
    flat = evaluate.main(common + ["--rope_scaling=yarn", "--rope_factor=2", "--rope_beta_slow=0.1",
                                   "--rope_truncate=False", "--rope_attention_factor=1.3"])
    plain = evaluate.main(common + ["--rope_scaling=yarn", "--rope_factor=2"])
    assert [r["method"] for r in rows] == ["yarn x2", "yarn x2"]
    assert [r["loss"] for r in rows] == [r["loss"] for r in flat]
    assert all(abs(a["loss"] - b["loss"]) > 1e-4 for a, b in zip(rows, plain))
