"""The RoPE methods as their papers and Hugging Face run them: every frequency method against the
installed transformers' own functions (ROPE_INIT_FUNCTIONS), the effective scale of each method at
each length (positional/rope_scaling/effective.py) against values worked by hand, the table of it in
docs/extrapolation.md against the function and configs/compare.py, and compare.py's per-method
factors and fine-tune budgets."""
import math
import os
import re

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import compare
from comparison import finetune
from measure import compare_report
from positional.rope import rope_inv_freq
from positional.rope_scaling import METHODS
from positional.rope_scaling.effective import effect

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = [(32, 1e4, 256, 4.0), (64, 1e4, 2048, 8.0), (128, 5e5, 8192, 16.0), (16, 500.0, 100, 2.5)]


def hf(dim, base, rope_type, seq_len=None, max_pos=None, **params):
    """transformers' (inv_freq, attention factor) for a head of dim channels, as float64."""
    cfg = LlamaConfig(hidden_size=dim * 2, num_attention_heads=2, max_position_embeddings=max_pos or 1 << 16,
                      rope_parameters=dict(rope_type=rope_type, rope_theta=base, **params))
    inv, m = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", seq_len=seq_len)
    return inv.double(), m


def ours(dim, base, kind, seq_len=0, **knobs):
    return rope_inv_freq(dim, base, kind, METHODS[kind][1](**knobs), seq_len=seq_len)


def close(got, want):   # transformers computes in float32
    torch.testing.assert_close(got[0], want[0], rtol=2e-6, atol=0)
    assert got[1] == pytest.approx(want[1], rel=1e-6)


@pytest.mark.parametrize("dim, base, L, s", SHAPES)
def test_every_frequency_method_matches_transformers(dim, base, L, s):
    knobs = dict(rope_factor=s, rope_original_max_position=L)
    close(ours(dim, base, "linear", **knobs), hf(dim, base, "linear", factor=s))
    close(ours(dim, base, "yarn", **knobs), hf(dim, base, "yarn", factor=s, original_max_position_embeddings=L))
    close(ours(dim, base, "ntk_by_parts", **knobs), hf(dim, base, "yarn", factor=s, original_max_position_embeddings=L,
                                                       attention_factor=1.0))   # YaRN's frequencies, no temperature
    close(ours(dim, base, "llama3", **knobs), hf(dim, base, "llama3", factor=s, original_max_position_embeddings=L,
                                                 low_freq_factor=1.0, high_freq_factor=4.0))
    # static NTK x s is transformers' dynamic at factor 1 and length s L: b (s L / L)^(d/(d-2))
    close(ours(dim, base, "ntk", **knobs), hf(dim, base, "dynamic", seq_len=round(s * L), max_pos=L, factor=1.0))
    for factor in (1.0, s):
        for n in (L // 2, L, L + 1, 4 * L, 16 * L):   # transformers reads L in max_position_embeddings
            close(ours(dim, base, "dynamic", n, rope_factor=factor, rope_original_max_position=L),
                  hf(dim, base, "dynamic", seq_len=n, max_pos=L, factor=factor))


# ---- the effective scale, by hand ----------------------------------------------------------
@pytest.mark.parametrize("factor, T, alpha", [(4.0, 1024, 13.0), (4.0, 4096, 61.0), (4.0, 512, 5.0), (4.0, 256, 1.0),
                                              (1.0, 1024, 4.0), (1.0, 4096, 16.0), (1.0, 200, 1.0)])
def test_dynamic_scale_is_the_hf_alpha_at_each_length(factor, T, alpha):
    """alpha(T) = s T / L - (s - 1) past L = 256 (1 up to L); base b alpha^(d/(d-2)), d = 32."""
    got = effect("dynamic", factor, 256, T, 32)
    assert got["scale"] == pytest.approx(alpha, rel=1e-12)
    assert got["base"] == pytest.approx(1e4 * alpha ** (32 / 30), rel=1e-9)
    assert got["reach"] == pytest.approx((T - 1) / (255 * alpha), rel=1e-12)
    assert (got["kept"], got["blended"], got["interpolated"]) == ((16, 0, 0) if alpha == 1 else (1, 14, 1))


def test_static_methods_at_factor_four():
    """d = 32, L = 256, s = 4, T = 4096: linear slows all 16 pairs by 4; NTK's base b 4^(32/30) slows pair 0 not at
    all, the last by 4, the rest between; YaRN keeps pair 0 (d(32) = 0.42 -> 0), blends 1..6 (d(1) = 6.44 -> 7),
    divides 9, with logits times (0.1 ln 4 + 1)^2; Llama 3 keeps wavelengths under L/4 = 64: 2 pi 10^(8j/32) < 64
    for j <= 4."""
    reach = 4095 / (255 * 4)
    want = {"linear": (0, 0, 16, 1.0, math.nan), "ntk": (1, 14, 1, 1.0, 1e4 * 4 ** (32 / 30)),
            "ntk_by_parts": (1, 6, 9, 1.0, math.nan), "yarn": (1, 6, 9, (0.1 * math.log(4) + 1) ** 2, math.nan),
            "llama3": (5, 2, 9, 1.0, math.nan)}
    for kind, (kept, blended, interpolated, logits, base) in want.items():
        got = effect(kind, 4.0, 256, 4096, 32)
        assert (got["kept"], got["blended"], got["interpolated"], got["pairs"]) == (kept, blended, interpolated, 16)
        assert got["scale"] == pytest.approx(4.0) and got["reach"] == pytest.approx(reach)
        assert got["logit_scale"] == pytest.approx(logits, rel=1e-12)
        assert got["base"] == pytest.approx(base, rel=1e-9, nan_ok=True)


@pytest.mark.parametrize("T, rerope, leaky", [(100, 99, 99), (256, 128, 128 + 127 / 32), (4096, 128, 128 + 3967 / 32)])
def test_rerope_caps_the_distance(T, rerope, leaky):
    """w = L / 2 = 128: the largest distance rotated is min(T - 1, w); Leaky w + (T - 1 - w) / 32."""
    for kind, distance in (("rerope", rerope), ("leaky_rerope", leaky)):
        got = effect(kind, 4.0, 256, T, 32)
        assert got["reach"] == pytest.approx(distance / 255) and got["scale"] == 1.0 and got["kept"] == 16


def test_unknown_method_is_one_line():
    with pytest.raises(ValueError, match="unknown RoPE method 'yarm'; valid: linear, ntk"):
        effect("yarm", 4.0, 256, 1024, 32)


def test_the_docs_table_is_the_functions():
    settings, _, cfg = compare.parse(["configs/compare.py"])
    lengths = settings["eval_lengths"]
    rows = compare_report.effective_scale_rows(settings, cfg, lengths)
    dim = rows[0]["pairs"] * 2
    dyn4 = [effect("dynamic", 4.0, cfg.block_size, n, dim) for n in lengths]
    want = "\n".join(compare_report.effective_scale_table(rows, cfg.block_size) + [""]
                     + compare_report.effective_scale_table(dyn4, cfg.block_size)) + "\n"
    text = open(os.path.join(ROOT, "docs", "extrapolation.md")).read()
    got = re.search(r"<!-- effective scale of configs/compare.py, then dynamic at s = 4 -->\n(.*?)"
                    r"<!-- end of the effective scale -->", text, re.S)
    assert got and got[1] == want, f"docs/extrapolation.md's effective-scale block differs; it should read:\n{want}"
    assert "| yarn | 4 | 1 / 6 / 9 of 16 |" in want and "| dynamic | 1 | " in want   # 1 of 16 pairs unscaled


# ---- compare.py: per-method factors, budgets -------------------------------------------------
def test_the_headline_runs_dynamic_at_factor_one_and_budgets_of_its_pretraining():
    settings, _, cfg = compare.parse(["configs/compare.py"])
    assert finetune.scaling_keys("dynamic", settings) == {"rope_scaling": "dynamic", "rope_factor": 1.0}
    assert finetune.scaling_keys("yarn", settings) == {"rope_scaling": "yarn", "rope_factor": 4.0}
    args = finetune.finetune_args("dynamic", settings, cfg)
    assert "--rope_factor=1.0" in args and f"--rope_original_max_position={cfg.block_size}" in args
    budgets = settings["finetune_iters"]
    tokens = settings["finetune_batch"] * settings["finetune_len"]   # an iteration at 4L holds as many as at L
    assert tokens == cfg.batch_size * cfg.block_size and budgets == [3, 30, 150, 600]
    assert [n / cfg.max_iters for n in budgets] == [0.001, 0.01, 0.05, 0.2]


def test_the_cpu_headline_fine_tunes_the_four_methods_of_pis_table_4():
    settings, _, cfg = compare.parse(["configs/compare_cpu.py"])
    assert finetune.finetune_methods("rope", settings) == ["direct", "linear", "ntk", "yarn"]
    assert finetune.finetune_methods("alibi", settings) == []
    fewer = compare.parse(["configs/compare_cpu.py", "--rope_scalings=['yarn','rerope']"])[0]
    assert finetune.finetune_methods("rope", fewer) == ["direct", "yarn"]   # only methods that are evaluated
    full = compare.parse(["configs/compare.py"])[0]
    methods = finetune.finetune_methods("rope", full)
    assert methods[-1] == "longlora" and "llama3" in methods
    assert (cfg.max_iters, cfg.batch_size * cfg.block_size) == (3000, 4096)   # configs/rope.py's 12.3M tokens


@pytest.mark.parametrize("given, budgets", [("100", [100]), ("[25,5,100,5]", [5, 25, 100]), ("0", []), ("[]", [])])
def test_budgets_from_the_command_line(given, budgets):
    settings, _, _ = compare.parse(["configs/compare.py", f"--finetune_iters={given}"])
    assert settings["finetune_iters"] == budgets and bool(settings["finetune_len"]) == bool(budgets)


@pytest.mark.parametrize("label, parsed", [("rope+yarn ft100", ("rope", "yarn", 100)), ("rope", ("rope", "", 0)),
                                           ("rope+yarn", ("rope", "yarn", 0)), ("rope+yarn ft", ("rope", "yarn", None)),
                                           ("rope+yarn ftx", ("rope", "yarn", None))])
def test_labels(label, parsed):
    assert finetune.parse_label(label) == parsed


@pytest.mark.parametrize("arg, says", [
    ("--finetune_iters=[5,-1]", "need --finetune_iters as iteration counts >= 0"),
    ("--finetune_iters=[5,2.5]", "need --finetune_iters as iteration counts >= 0"),
    ("--rope_factors={'dynamc': 1.0}", "rope_factors: need {method: factor > 0}"),
    ("--rope_factors={'dynamic': 0}", "rope_factors: need {method: factor > 0}"),
    ("--context_labels=['rope+yarn ft']", "'<encoding>+<method> ftN'"),
    ("--finetune_methods=['yarn','rerope']", "finetune_methods: rerope not a frequency method; use some of linear"),
])
def test_bad_settings_are_one_line(arg, says):
    with pytest.raises(ValueError, match=re.escape(says)) as e:
        compare.parse(["configs/compare.py", arg])
    assert "\n" not in str(e.value)
