"""RoPE length extension (positional/rope_scaling/): each method's frequencies against
values computed by hand from its formula, identity at factor 1, ReRoPE's attention,
dynamic NTK with the KV cache, and the errors."""
import math

import pytest
import torch

import positional
from training.config import ConfigError, load_config
from model import GPTConfig
from positional.base import Ctx
from positional.rerope import ReRoPE
from positional.rope import RoPE, rope_inv_freq
from positional.rope_scaling import METHODS
from tests.conftest import assert_decodes_like_a_recompute, rotate, tiny_gpt

# head_dim 8, base 16: theta_j = 16^(-2j/8) = 2^-j
PLAIN = torch.tensor([1.0, 0.5, 0.25, 0.125], dtype=torch.float64)
# with L = 16 pi each pair makes L theta_j / (2 pi) = 8, 4, 2, 1 turns within L
L_TURNS = 16 * math.pi


def settings(kind, **knobs):
    """The method's settings from short names: factor -> rope_factor, beta_fast -> rope_beta_fast, ..."""
    return METHODS[kind][1](**{f"rope_{k}": v for k, v in knobs.items()})


def inv(kind, seq_len=0, **knobs):
    return rope_inv_freq(8, 16.0, kind, settings(kind, **knobs), seq_len=seq_len)


def test_linear_divides_every_frequency():
    got, scale = inv("linear", factor=4.0)
    torch.testing.assert_close(got, PLAIN / 4)
    assert scale == 1.0


def test_ntk_enlarges_the_base():
    got, scale = inv("ntk", factor=4.0)
    base = 16 * 4 ** (8 / 6)                                   # b * s^(d/(d-2))
    torch.testing.assert_close(got, base ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    assert got[0] == 1.0 and got[-1].item() == pytest.approx(0.125 / 4)   # highest kept, lowest / s
    assert scale == 1.0


def test_dynamic_follows_the_length_past_the_original():
    for n in (0, 8, 16):  # within the original length: plain RoPE exactly
        got, _ = inv("dynamic", factor=2.0, original_max_position=16, seq_len=n)
        assert torch.equal(got, PLAIN)
    got, scale = inv("dynamic", factor=2.0, original_max_position=16, seq_len=32)
    base = 16 * (2 * 32 / 16 - 1) ** (8 / 6)                   # b * (s n / L - (s - 1))^(d/(d-2)), = 16 * 3^(4/3)
    torch.testing.assert_close(got, base ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    assert scale == 1.0


# The paper's ramp (rope_ramp="turns"): turns 8, 4, 2, 1 against alpha = 1, beta = 4:
# gamma = 1, 1, 1/3, 0; s = 2
BY_PARTS = torch.tensor([1.0, 0.5, (2 / 3) * 0.25 / 2 + (1 / 3) * 0.25, 0.125 / 2], dtype=torch.float64)
# The default index ramp (HF, the YaRN authors' code): d(beta) = D ln(L/(2 pi beta)) / (2 ln b)
# = log2(8 / beta) here, so d(4) = 1, d(1) = 3; ramp (j - 1)/2 = 0, 0, 1/2, 1; gamma = 1 - ramp
BY_INDEX = torch.tensor([1.0, 0.5, 0.5 * 0.25 / 2 + 0.5 * 0.25, 0.125 / 2], dtype=torch.float64)


@pytest.mark.parametrize("ramp, want", [("index", BY_INDEX), ("turns", BY_PARTS)])
def test_ntk_by_parts_blends(ramp, want):
    got, scale = inv("ntk_by_parts", factor=2.0, original_max_position=L_TURNS, beta_fast=4.0, beta_slow=1.0, ramp=ramp)
    torch.testing.assert_close(got, want)
    assert scale == 1.0


@pytest.mark.parametrize("ramp, want", [("index", BY_INDEX), ("turns", BY_PARTS)])
def test_yarn_is_by_parts_plus_temperature(ramp, want):
    got, scale = inv("yarn", factor=2.0, original_max_position=L_TURNS, beta_fast=4.0, beta_slow=1.0, ramp=ramp)
    torch.testing.assert_close(got, want)
    assert scale == pytest.approx(0.1 * math.log(2) + 1)


def test_llama3_by_wavelength():
    # wavelengths 2pi, 4pi, 8pi, 16pi against L/high = 4pi and L/low = 16pi: the turns blend of NTK-by-parts
    got, scale = inv("llama3", factor=2.0, original_max_position=L_TURNS, low_freq_factor=1.0, high_freq_factor=4.0)
    torch.testing.assert_close(got, BY_PARTS)
    got, _ = inv("llama3", factor=8.0, original_max_position=L_TURNS / 4, low_freq_factor=1.0, high_freq_factor=4.0)
    # L = 4pi: wavelength 2pi is between L/4 and L (mu = (2 - 1)/3), the others longer than L (divided by 8)
    torch.testing.assert_close(got, torch.tensor([(2 / 3) / 8 + 1 / 3, 0.5 / 8, 0.25 / 8, 0.125 / 8],
                                                 dtype=torch.float64))


@pytest.mark.parametrize("kind", [k for k in METHODS])
def test_factor_one_is_plain_rope(kind):
    plain, _ = rope_inv_freq(32)
    seq_len = 64 if kind == "dynamic" else 256   # dynamic: any factor is plain RoPE up to the original length
    got, scale = rope_inv_freq(32, 10000.0, kind, settings(kind, factor=1.0, original_max_position=64),
                               seq_len=seq_len)
    torch.testing.assert_close(got, plain, rtol=1e-15, atol=0)
    assert scale == 1.0


def test_yarn_scale_is_folded_into_the_tables():
    pe = RoPE(8, base=16.0, scaling=("yarn", settings("yarn", factor=4.0, original_max_position=32)))
    a = torch.arange(10, dtype=torch.float64)[:, None] * pe.inv_freq
    m = 0.1 * math.log(4) + 1
    pos = torch.arange(10)
    torch.testing.assert_close(pe.tables(pos, False, Ctx(pos, pos))[0], (a.cos() * m).float())
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)   # logits scale by m^2 at distance 0
    s = (rotate(pe, q, torch.tensor([3])) * rotate(pe, k, torch.tensor([3]), key=True)).sum()
    assert s.item() == pytest.approx(m ** 2 * (q * k).sum().item(), rel=1e-5, abs=1e-5)


# ---- ReRoPE ----------------------------------------------------------------------------
@pytest.mark.parametrize("leak", [None, 4.0])
def test_rerope_logits_use_capped_distances(leak):
    w, D = 3, 8
    pe, plain = ReRoPE(D, base=16.0, window=w, leak=leak), RoPE(D, base=16.0)
    q, k = torch.randn(1, 2, 10, D, dtype=torch.float64), torch.randn(1, 2, 10, D, dtype=torch.float64)
    pos = torch.arange(10)
    got = pe.logits(rotate(pe, q, pos), rotate(pe, k, pos, key=True), Ctx(pos, pos), layer=0)
    for i in range(10):
        for j in range(i + 1):
            rel = i - j if i - j < w else (w if leak is None else w + (i - j - w) / leak)
            want = (plain.rotate_at(q[:, :, i:i + 1], torch.tensor([float(rel)])) * k[:, :, j:j + 1]).sum(-1)
            torch.testing.assert_close(got[:, :, i, j], want[..., 0] / math.sqrt(D), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["rerope", "leaky_rerope"])
def test_rerope_equals_rope_within_the_window(kind):
    idx = torch.randint(0, 40, (2, 24))
    with torch.no_grad():
        plain = tiny_gpt("rope")(idx)[0]
        same = tiny_gpt("rope", rope_scaling=kind, rerope_window=24)(idx)[0]
        capped = tiny_gpt("rope", rope_scaling=kind, rerope_window=6)(idx)[0]
    torch.testing.assert_close(same, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(capped[:, :6], plain[:, :6], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(capped[:, 8:], plain[:, 8:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("kind", ["rerope", "leaky_rerope", "yarn"])
def test_scaled_rope_kv_cache_matches_full_forward(kind):
    knobs = {"rerope": dict(rerope_window=4), "leaky_rerope": dict(rerope_window=4, rerope_leak=4.0),
             "yarn": dict(rope_factor=4.0)}[kind]
    assert_decodes_like_a_recompute(tiny_gpt("rope", block_size=8, rope_scaling=kind, **knobs),
                                    torch.randint(0, 40, (2, 30)), prefill=5)


# ---- dynamic NTK -------------------------------------------------------------------------
def test_dynamic_is_plain_rope_within_the_original_length():
    idx = torch.randint(0, 40, (2, 16))
    with torch.no_grad():
        plain = tiny_gpt("rope", block_size=16)(idx)[0]
        dyn = tiny_gpt("rope", block_size=16, rope_scaling="dynamic", rope_factor=4.0)(idx)[0]
        longer = tiny_gpt("rope", block_size=8, rope_scaling="dynamic", rope_factor=4.0)(idx)[0]
    assert torch.equal(dyn, plain)
    assert not torch.allclose(longer, plain, rtol=0, atol=1e-5)


@pytest.mark.parametrize("pos", ["rope", "xpos"])
def test_dynamic_cached_decoding_equals_recomputing_the_prefix(pos):
    """Keys are cached raw and re-rotated with the frequencies of the current length, so
    each decoding step equals a fresh forward over the whole prefix (exactly for one layer:
    deeper layers' cached values keep the frequencies of their own step)."""
    model = tiny_gpt(pos, n_layer=1, block_size=8, rope_scaling="dynamic", rope_factor=2.0)
    assert model.pe.length_dependent
    idx = torch.randint(0, 40, (1, 24))
    with torch.no_grad():
        model.setup_cache(1, 24)
        steps = [model(idx[:, :4])[0][:, -1]] + [model(idx[:, t:t + 1])[0][:, -1] for t in range(4, 24)]
        model.clear_cache()
        fresh = [model(idx[:, :t + 1])[0][:, -1] for t in range(3, 24)]
    torch.testing.assert_close(torch.cat(steps), torch.cat(fresh), rtol=1e-5, atol=1e-5)


# ---- errors -------------------------------------------------------------------------------
def test_unknown_scaling_is_refused():
    with pytest.raises(ValueError,
                       match="unknown rope_scaling 'yarm'; did you mean 'yarn'. valid: linear, ntk, dynamic"):
        tiny_gpt("rope", rope_scaling="yarm")
    with pytest.raises(ConfigError, match="unknown rope_scaling 'yarm'"):
        load_config(["--rope_scaling=yarm"])


@pytest.mark.parametrize("factor", [0.0, -2.0])
def test_factor_must_be_positive(factor):
    with pytest.raises(ValueError, match="rope_factor must be > 0"):
        tiny_gpt("rope", rope_scaling="linear", rope_factor=factor)
    with pytest.raises(ConfigError, match="rope_factor must be > 0"):
        load_config(["--rope_scaling=linear", f"--rope_factor={factor}"])


@pytest.mark.parametrize("name", [n for n, c in positional.REGISTRY.items() if not positional.rotary(c)])
def test_scaling_refused_for_non_rotary_encodings(name):
    with pytest.raises(ValueError, match=f"needs a rotary encoding .*this model uses '{name}'"):
        positional.build(GPTConfig(pos_encoding=name, rope_scaling="yarn", pos_settings={"rope_factor": 4.0}))


def test_xpos_takes_frequency_methods_but_not_rerope():
    assert tiny_gpt("xpos", rope_scaling="yarn", rope_factor=4.0).pe.attention_scale > 1
    with pytest.raises(ValueError,
                       match="rope_scaling='rerope' is defined for the rope encoding only; this model uses 'xpos'"):
        tiny_gpt("xpos", rope_scaling="rerope")


@pytest.mark.slow
def test_fine_tune_longer_keeps_the_trained_length_as_original(tiny_data, tmp_path):
    """Position interpolation's recipe: resume at a longer block_size with a scaling; L is
    the length the checkpoint was trained at, and the checkpoint remembers it."""
    from tests.conftest import TINY_ARGS, run_py
    common = [*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}"]
    run_py("train.py", *common, "--max_iters=5")
    run_py("train.py", *common, "--max_iters=10", "--init_from=resume", "--block_size=32",
           "--rope_scaling=linear", "--rope_factor=2")
    args = torch.load(tmp_path / "ckpt.pt", weights_only=False)["model_args"]
    assert (args["block_size"], args["rope_scaling"], args["pos_settings"]["rope_original_max_position"]) == \
        (32, "linear", 16)
