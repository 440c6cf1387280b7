"""Issue #13's encodings (p_rope, resonance_rope, fox, cope): each formula against values
computed by hand, their invariances, and a training run. Causality, KV cache == recompute,
16x finiteness and windows come from the tests parametrised over positional.REGISTRY."""
import math

import pytest
import torch

from model import GPT, KVCache
from positional.base import Ctx
from training.config import model_config
from positional.alibi import alibi_slopes
from positional.cope import CoPE, cope_positions, interpolate
from positional.fox import FoX
from positional.resonance import resonance
from tests.conftest import assert_decodes_like_a_recompute, rotate, scores, tiny_gpt, trained
from tests.test_window import test_bounded_cache_decodes_4x_the_window_like_a_recompute as window_cache_check

NEW = ["p_rope", "resonance_rope", "fox", "cope"]


@pytest.mark.parametrize("name", ["p_rope", "resonance_rope", "cope"])
@pytest.mark.parametrize("shift", [1, 37, 1000])
def test_relative_scores_invariant_to_shift(name, shift):
    pe = tiny_gpt(name).pe
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 9, 8)
    q_pos, k_pos = torch.arange(3, 9), torch.arange(0, 9)
    torch.testing.assert_close(scores(pe, q, k, q_pos, k_pos), scores(pe, q, k, q_pos + shift, k_pos + shift),
                               rtol=1e-4, atol=1e-4)


# ---- p-RoPE ---------------------------------------------------------------------------------
def turn(x, pairs, m):
    """Reference half-split rotation of one vector x (D,) at position m: pair (i, i + D/2) by m*theta_i."""
    D, out = len(x), x.clone()
    for i, theta in enumerate(pairs):
        c, s = math.cos(m * theta), math.sin(m * theta)
        out[i], out[i + D // 2] = x[i] * c - x[i + D // 2] * s, x[i] * s + x[i + D // 2] * c
    return out


def test_p_rope_keeps_the_highest_frequencies_and_zeroes_the_rest():
    """D = 8, base 10^4: RoPE's theta = 1, 0.1, 0.01, 0.001; p = 0.5 keeps 1 and 0.1."""
    pe = tiny_gpt("p_rope", n_embd=16, n_head=2, p_rope_fraction=0.5).pe
    m = torch.tensor([5.0])
    torch.testing.assert_close(pe.angles(m, pe.inv_freq)[0], torch.tensor([5.0, 0.5, 0.0, 0.0], dtype=torch.float64))
    x = torch.arange(1.0, 9.0)
    torch.testing.assert_close(rotate(pe, x.view(1, 1, 1, 8), torch.tensor([5])).flatten(), turn(x, [1, 0.1, 0, 0], 5))
    y = rotate(pe, x.view(1, 1, 1, 8), torch.tensor([7])).flatten()
    assert torch.equal(y[[2, 3, 6, 7]], x[[2, 3, 6, 7]])          # pairs (2, 6) and (3, 7) are position-free
    scaled = tiny_gpt("p_rope", n_embd=16, n_head=2, p_rope_fraction=0.5, rope_scaling="linear", rope_factor=4.0).pe
    torch.testing.assert_close(scaled.angles(m, scaled.inv_freq)[0],
                               torch.tensor([1.25, 0.125, 0.0, 0.0], dtype=torch.float64))


def test_p_rope_ends_are_rope_and_nope():
    x, pos = torch.randn(1, 4, 6, 8), torch.arange(10, 16)
    full, rope, nope = (tiny_gpt(n, **kw).pe for n, kw in
                        [("p_rope", {"p_rope_fraction": 1.0}), ("rope", {}), ("p_rope", {"p_rope_fraction": 0.0})])
    torch.testing.assert_close(rotate(full, x, pos), rotate(rope, x, pos))
    assert torch.equal(rotate(nope, x, pos), x)


def test_p_rope_is_not_partial_rotary():
    """rotary_fraction 0.5 rotates channels 0-3 as pairs (0, 2), (1, 3) at theta = 1, 0.01
    (frequencies over the rotated width 4); p_rope 0.5 pairs (0, 4), (1, 5) at theta = 1, 0.1."""
    partial = tiny_gpt("rope", n_embd=16, n_head=2, rotary_fraction=0.5).pe
    p = tiny_gpt("p_rope", n_embd=16, n_head=2, p_rope_fraction=0.5).pe
    x, m = torch.arange(1.0, 9.0), 3
    a = rotate(partial, x.view(1, 1, 1, 8), torch.tensor([m])).flatten()
    b = rotate(p, x.view(1, 1, 1, 8), torch.tensor([m])).flatten()
    want = x.clone()
    want[:4] = turn(x[:4], [1.0, 0.01], m)
    torch.testing.assert_close(a, want)
    torch.testing.assert_close(b, turn(x, [1.0, 0.1, 0, 0], m))
    assert not torch.allclose(a, b)


def test_p_rope_refuses_rotary_fraction_and_bad_p():
    with pytest.raises(ValueError, match="rotary_fraction is a setting of .*this run uses p_rope"):
        tiny_gpt("p_rope", rotary_fraction=0.5)
    with pytest.raises(ValueError, match=r"p_rope_fraction must be in \[0, 1\]"):
        tiny_gpt("p_rope", p_rope_fraction=1.5)


# ---- Resonance RoPE ---------------------------------------------------------------------------
def test_resonance_rounds_each_wavelength_to_whole_tokens():
    """D = 8, base 10^4: wavelengths 2 pi / theta = 6.28, 62.8, 628.3, 6283.2 -> 6, 63, 628, 6283."""
    inv = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    want = torch.tensor([2 * math.pi / 6, 2 * math.pi / 63, 2 * math.pi / 628, 2 * math.pi / 6283], dtype=torch.float64)
    torch.testing.assert_close(resonance(inv), want)
    assert resonance(torch.tensor([0.0], dtype=torch.float64)).item() == 0.0


def test_resonance_angles_repeat_every_rounded_wavelength():
    pe = tiny_gpt("resonance_rope", n_embd=16, n_head=2).pe
    a = pe.angles(torch.tensor([0, 6, 63, 628]), pe.inv_freq)
    assert abs(math.sin(a[1, 0])) < 1e-9 and abs(math.sin(a[2, 1])) < 1e-9 and abs(math.sin(a[3, 2])) < 1e-9
    rope = tiny_gpt("rope", n_embd=16, n_head=2).pe
    plain = rope.angles(torch.tensor([6]), rope.inv_freq)
    assert abs(math.sin(plain[0, 0])) > 0.2                          # RoPE's 6.28-token wavelength does not


@pytest.mark.parametrize("scaling", ["linear", "yarn", "dynamic"])
def test_resonance_rounds_after_the_scaling_method(scaling):
    """The wavelengths of the scaled frequencies are whole numbers (dynamic: at a length past L)."""
    pe = tiny_gpt("resonance_rope", rope_scaling=scaling, rope_factor=4.0).pe
    theta = pe.angles(torch.tensor([1]), pe.inv_freq)[0]
    wavelength = 2 * math.pi / theta
    torch.testing.assert_close(wavelength, wavelength.round())
    scaled = tiny_gpt("rope", rope_scaling=scaling, rope_factor=4.0).pe
    torch.testing.assert_close(theta, resonance(scaled.angles(torch.tensor([1]), scaled.inv_freq)[0]))
    assert not torch.allclose(theta, pe.inv_freq)


# ---- FoX --------------------------------------------------------------------------------------
def fox_logits(pe, x, q, k, q_pos, k_pos, layer=0, cache=None):
    if cache is not None:
        cache.begin(q_pos)   # this call's slots, as the model places them
    ctx = Ctx(q_pos, k_pos, cache=cache)
    pe.read_input(x, ctx, layer)   # the gates, from the layer input
    return pe.logits(q, k, ctx, layer)


def test_fox_bias_is_the_sum_of_log_gates_in_between():
    """Gate logits 0, ln 3, -ln 3, 0 -> f = 1/2, 3/4, 1/4, 1/2; logit(i, j) = sum_{l=j+1..i} log f_l."""
    pe = FoX(n_layer=1, n_head=1, n_embd=2)
    with torch.no_grad():
        pe.weight.copy_(torch.tensor([[[1.0, 0.0]]]))
        pe.bias.zero_()
    a = torch.tensor([0.0, math.log(3), -math.log(3), 0.0])
    x = torch.stack([a, torch.full_like(a, 5.0)], dim=-1)[None]                 # (1, 4, 2): 2nd channel ignored
    qk = torch.zeros(1, 1, 4, 2)
    pos = torch.arange(4)
    got = fox_logits(pe, x, qk, qk, pos, pos)[0, 0]
    f = [1 / 2, 3 / 4, 1 / 4, 1 / 2]
    for i in range(4):
        for j in range(i + 1):
            assert got[i, j].item() == pytest.approx(math.log(math.prod(f[j + 1:i + 1])), abs=1e-6)


def test_fox_starts_as_alibi_and_ignores_absolute_positions():
    pe = FoX(n_layer=2, n_head=4, n_embd=8)
    with torch.no_grad():
        pe.weight.zero_()                                                        # f_t = exp(-m_h) everywhere
    x, q, k = torch.randn(2, 6, 8), torch.randn(2, 4, 6, 4), torch.randn(2, 4, 6, 4)
    pos = torch.arange(6)
    decay = fox_logits(pe, x, q, k, pos, pos, layer=1) - q @ k.transpose(-1, -2) / 2
    alibi = -alibi_slopes(4)[:, None, None] * (pos[:, None] - pos[None, :])       # (H, T, T)
    keep = pos[None, :] <= pos[:, None]
    torch.testing.assert_close(decay[..., keep], alibi.expand(2, 4, 6, 6)[..., keep], rtol=1e-5, atol=1e-5)
    pe.weight.data.normal_()
    torch.testing.assert_close(fox_logits(pe, x, q, k, pos, pos), fox_logits(pe, x, q, k, pos + 500, pos + 500))


def test_fox_decoding_continues_the_running_sum():
    """Token by token, c_i - c_j equals the full pass's, also for keys written many calls ago: the
    running sums live in the cache (and only there: without it nothing is kept)."""
    pe = FoX(n_layer=1, n_head=2, n_embd=4)
    pe.weight.data.normal_()
    x, q, k = torch.randn(1, 7, 4), torch.randn(1, 2, 7, 3), torch.randn(1, 2, 7, 3)
    pos = torch.arange(7)
    full = fox_logits(pe, x, q, k, pos, pos)
    cache = KVCache(1, 1, 2, 3, 7, 0, 0, torch.float32, "cpu")
    fox_logits(pe, x[:, :3], q[:, :, :3], k[:, :, :3], pos[:3], pos[:3], cache=cache)
    for t in range(3, 7):
        step = fox_logits(pe, x[:, t:t + 1], q[:, :, t:t + 1], k[:, :, :t + 1], pos[t:t + 1], pos[:t + 1], cache=cache)
        torch.testing.assert_close(step[..., 0, :], full[..., t, :t + 1], rtol=1e-5, atol=1e-5)


# ---- CoPE -------------------------------------------------------------------------------------
def test_cope_positions_count_the_gates_from_each_key_to_the_query():
    g = torch.tensor([[0.5, 0.0, 0.0],
                      [0.2, 0.9, 0.0],
                      [0.1, 0.3, 0.6]])
    want = torch.tensor([[0.5, 0.0, 0.0],
                         [1.1, 0.9, 0.0],
                         [1.0, 0.9, 0.6]])
    torch.testing.assert_close(cope_positions(g, 5.0), want)
    torch.testing.assert_close(cope_positions(g, 1.0), want.clamp(max=1.0))   # counts past P share e[P]
    # keys held rotated, as a ring holds them (slots of positions 2, 0, 1): counted in position order all the same
    latest_first = torch.tensor([0, 2, 1])                            # the slots from the latest position back
    held = g[:, [2, 0, 1]]
    ring = latest_first, latest_first.argsort()
    torch.testing.assert_close(cope_positions(held, 5.0, ring), want[:, [2, 0, 1]])


def test_cope_interpolates_between_integer_positions():
    table = torch.tensor([[10.0, 20.0, 40.0, 40.0]])                             # q.e[0], q.e[1], q.e[2] (P), q.e[P]
    p = torch.tensor([[0.0, 0.6, 1.25, 2.0]])
    torch.testing.assert_close(interpolate(table, p), torch.tensor([[10.0, 16.0, 25.0, 40.0]]))


def test_cope_logits_match_a_reference_loop():
    """logit(i, j) = (q_i.k_j + q_i.e[p_ij]) / sqrt(D), p_ij = sum_{t=j..i} sigmoid(q_i.k_t / sqrt(D))."""
    torch.manual_seed(0)
    D, T, P = 4, 5, 3
    pe = CoPE(n_layer=1, head_dim=D, max_position=P)
    pe.emb.data.normal_()
    q, k = torch.randn(1, 1, T, D), torch.randn(1, 1, T, D)
    got = pe.logits(q, k, Ctx(torch.arange(T), torch.arange(T)), 0)[0, 0]
    e = pe.emb[0].detach()
    for i in range(T):
        gates = [torch.sigmoid(q[0, 0, i] @ k[0, 0, t] / 2) for t in range(T)]
        for j in range(i + 1):
            p = min(sum(gates[j:i + 1]).item(), P)
            lo = math.floor(p)
            ep = e[lo] * (1 - (p - lo)) + e[min(lo + 1, P)] * (p - lo)
            want = (q[0, 0, i] @ k[0, 0, j] + q[0, 0, i] @ ep) / 2
            assert got[i, j].item() == pytest.approx(want.item(), abs=1e-5)


def test_cope_window_hides_keys_from_the_count():
    """Window 3 with one sink: query 7 sees keys 0, 5, 6, 7. Keys 5-7 count as without a
    window; the sink counts only the visible keys: p_70 = g_70 + g_75 + g_76 + g_77."""
    windowed = tiny_gpt("cope", window=3, sinks=1).pe                            # the window comes with ctx
    q, k, pos = torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8), torch.arange(8)
    a, b = windowed.logits(q, k, Ctx(pos, pos, 3, 1), 0), windowed.logits(q, k, Ctx(pos, pos), 0)
    torch.testing.assert_close(a[..., 7, 5:], b[..., 7, 5:])
    qi, e = q[0, :, 7], windowed.emb[0].detach()                                  # (H, D), (P + 1, D)
    g = torch.sigmoid((k[0] @ qi[:, :, None])[..., 0] / math.sqrt(8))              # (H, T) gates of query 7
    p = g[:, [0, 5, 6, 7]].sum(-1)                                                 # (H,)
    lo = p.floor().long()
    e_p = e[lo] * (1 - (p - lo))[:, None] + e[lo + 1] * (p - lo)[:, None]           # (H, D)
    torch.testing.assert_close(a[0, :, 7, 0], ((qi * k[0, :, 0]).sum(-1) + (qi * e_p).sum(-1)) / math.sqrt(8))
    assert not torch.allclose(a[..., 7, 0], b[..., 7, 0])


# ---- windows and the bounded cache ------------------------------------------------------------
@pytest.mark.parametrize("name", NEW)
def test_bounded_window_cache_decodes_like_a_recompute(name):
    window_cache_check(name)


# ---- training smoke -------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("config", NEW)
def test_training_loss_falls(tiny_data, tmp_path, config):
    model, ckpt, _ = trained(config, tiny_data, tmp_path)
    assert model.pe.name == config
    with_logn = model_config(ckpt["model_args"], {"logn_scaling": True})   # an evaluation-time option
    GPT(with_logn).load_state_dict(ckpt["model"])


# ---- qk_norm and log-n scaling: model options, not encodings ---------------------------------
def test_logn_factor_by_hand():
    """L = 16: 1 up to n = 16 tokens; log 32 / log 16 = 5/4 at n = 32; 2 at n = 256."""
    from attention.temperature import logn_factor
    torch.testing.assert_close(logn_factor(torch.tensor([0, 15, 31, 255]), 16), torch.tensor([1.0, 1.0, 1.25, 2.0]))


def test_logn_scaling_changes_nothing_within_the_training_length():
    idx = torch.randint(0, 40, (2, 40))
    with torch.no_grad():
        plain = tiny_gpt("rope", block_size=16)(idx)[0]
        scaled = tiny_gpt("rope", block_size=16, logn_scaling=True)(idx)[0]
    assert torch.equal(plain[:, :16], scaled[:, :16])
    assert not torch.allclose(plain[:, 16:], scaled[:, 16:])


def test_qk_norm_gives_the_encoding_unit_rms_queries_and_keys(monkeypatch):
    model = tiny_gpt("rope", qk_norm=True)
    seen = []
    rotate = model.pe.rotate
    monkeypatch.setattr(model.pe, "rotate", lambda x, ctx, key=False: seen.append(x) or rotate(x, ctx, key))
    with torch.no_grad():
        model(torch.randint(0, 40, (2, 12)))
    assert len(seen) == 4                                                      # q and k of 2 layers
    for x in seen:
        torch.testing.assert_close(x.pow(2).mean(-1), torch.ones(x.shape[:-1]), rtol=1e-3, atol=1e-3)  # eps 1e-6
    plain = tiny_gpt("rope")
    assert sum(p.numel() for p in model.parameters()) - sum(p.numel() for p in plain.parameters()) == 2 * 2 * 8


@pytest.mark.parametrize("name", ["rope", "alibi", "fox"])
@pytest.mark.parametrize("option", ["qk_norm", "logn_scaling"])
def test_model_options_keep_cache_equal_to_recompute(name, option):
    assert_decodes_like_a_recompute(tiny_gpt(name, block_size=8, **{option: True}), torch.randint(0, 40, (2, 24)), 5)


def test_linear_attention_refuses_the_softmax_options():
    with pytest.raises(ValueError, match="qk_norm, logn_scaling and ssmax are options of softmax attention"):
        tiny_gpt("rope", attention="linear", qk_norm=True)
