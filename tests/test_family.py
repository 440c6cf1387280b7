"""Shaw, Transformer-XL, Kerple, FIRE and linear attention: formulas against explicit
reference computations, invariances, and end-to-end training."""
import math
import os
import re

import pytest
import torch

import positional
from training.config import ConfigError, load_config
from attention.linear import causal_linear_attention, feature_map
from model import GPT, GPTConfig
from positional.base import Ctx
from positional.fire import fire_input
from positional.kerple import kerple_bias
from positional.sinusoidal import sinusoidal_table
from tests.conftest import TINY_ARGS, rotate, run_py, scores, tiny_gpt, trained

NEW = ["shaw", "transformer_xl", "kerple", "fire"]


def visible(q_pos, k_pos):
    return k_pos[None, :] <= q_pos[:, None]                                 # (Tq, Tk)


# ---- translation invariance (FIRE only below its threshold L) ----------------------------
@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("shift", [1, 13])
def test_relative_scores_invariant_to_shift(name, shift):
    pe = tiny_gpt(name, **({"fire_init_L": 64} if name == "fire" else {})).pe
    if name == "fire":
        pe.L_multiplier.data.fill_(1.0)                                     # L = 64 > every position below
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 9, 8)
    q_pos, k_pos = torch.arange(3, 9), torch.arange(0, 9)
    m = visible(q_pos, k_pos)
    for layer in (0, 1):
        a = scores(pe, q, k, q_pos, k_pos, layer)
        b = scores(pe, q, k, q_pos + shift, k_pos + shift, layer)
        torch.testing.assert_close(a[..., m], b[..., m], rtol=1e-5, atol=1e-5)


def test_fire_is_not_shift_invariant_past_L():
    """Past L the normaliser psi(i) grows with the query position: interpolation, by design."""
    pe = tiny_gpt("fire", fire_init_L=4).pe
    pe.L_multiplier.data.fill_(1.0)
    q_pos, k_pos = torch.arange(10, 12), torch.arange(0, 12)
    a, b = pe.dense_bias(q_pos, k_pos), pe.dense_bias(q_pos + 50, k_pos + 50)
    assert not torch.allclose(a[:, :, 2:], b[:, :, 2:])


# ---- Shaw ----------------------------------------------------------------------------------
def shaw_reference(q, k, v, wk, wv, q_pos, k_pos, max_distance):
    """The paper's e_ij and z_i with the full (Tq, Tk, D) tensors a^K_ij, a^V_ij."""
    d = (q_pos[:, None] - k_pos[None, :]).clamp(0, max_distance)           # (Tq, Tk)
    aK, aV = wk[d], wv[d]                                                   # (Tq, Tk, D)
    e = torch.einsum("bhid,bhjd->bhij", q, k) + torch.einsum("bhid,ijd->bhij", q, aK)
    e = (e / math.sqrt(q.shape[-1])).masked_fill(~visible(q_pos, k_pos), float("-inf"))
    p = e.softmax(-1)
    return e, p @ v + torch.einsum("bhij,ijd->bhid", p, aV)


@pytest.mark.parametrize("max_distance", [3, 40])
def test_shaw_matches_the_papers_formulas(max_distance):
    """Clipped at k = 3, and with k past the sequence: full relative representations."""
    pe = tiny_gpt("shaw", shaw_max_distance=max_distance).pe
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 19, 8), torch.randn(2, 4, 19, 8)
    q_pos, k_pos = torch.arange(14, 19), torch.arange(0, 19)               # 5 new queries after 14 cached keys
    for layer in (0, 1):
        want_e, want_z = shaw_reference(q, k, v, pe.key_emb[layer], pe.value_emb[layer], q_pos, k_pos, max_distance)
        e = scores(pe, q, k, q_pos, k_pos, layer).masked_fill(~visible(q_pos, k_pos), float("-inf"))
        p = e.softmax(-1)
        z = p @ v + pe.value_term(p, Ctx(q_pos, k_pos), layer)
        torch.testing.assert_close(e, want_e)
        torch.testing.assert_close(z, want_z, rtol=1e-5, atol=1e-5)


def test_shaw_full_range_gives_every_distance_its_own_vector():
    pe = tiny_gpt("shaw", shaw_max_distance=40).pe
    q = torch.randn(1, 1, 1, 8)
    e = scores(pe, q, torch.zeros(1, 1, 20, 8), torch.tensor([19]), torch.arange(20))[0, 0, 0]
    assert len(set(e.tolist())) == 20                                      # no clipping: 20 distinct terms
    torch.testing.assert_close(e, (pe.key_emb[0, torch.arange(19, -1, -1)] @ q.flatten()) / math.sqrt(8))


def test_shaw_without_values_and_its_size():
    model = tiny_gpt("shaw", shaw_values=False, shaw_max_distance=5)
    q, k, v = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8)
    ctx = Ctx(torch.arange(1, 3), torch.arange(3))
    p = model.pe.logits(q, k, ctx, 0).masked_fill(~ctx.visible(), float("-inf")).softmax(-1)
    torch.testing.assert_close(model.pe.attend(q, k, v, ctx, 0), p @ v)                # no value term
    assert sum(p.numel() for p in model.pe.parameters()) == 2 * 6 * 8     # layers x (k+1) x head_dim
    assert sum(p.numel() for p in tiny_gpt("shaw", shaw_max_distance=5).pe.parameters()) == 2 * 2 * 6 * 8


# ---- Transformer-XL ---------------------------------------------------------------------
def test_transformer_xl_matches_the_four_terms():
    """(a) q.k + (b) q.W_R R_{i-j} + (c) u.k + (d) v.W_R R_{i-j}, each term written out."""
    pe = tiny_gpt("transformer_xl").pe
    H, D, C = 4, 8, 32
    q, k = torch.randn(2, H, 3, D), torch.randn(2, H, 10, D)
    q_pos, k_pos = torch.arange(7, 10), torch.arange(0, 10)
    got = scores(pe, q, k, q_pos, k_pos, layer=1)
    for a, i in enumerate(q_pos.tolist()):
        for j in range(i + 1):
            R = sinusoidal_table(1, C, positions=torch.tensor([i - j]))[0]    # (C,)
            r = (R @ pe.w_r[1]).view(H, D)                                  # (H, D)
            want = (q[:, :, a] * k[:, :, j]).sum(-1) + (q[:, :, a] * r).sum(-1) \
                + (pe.u * k[:, :, j]).sum(-1) + (pe.v * r).sum(-1)          # (B, H)
            torch.testing.assert_close(got[:, :, a, j], want / math.sqrt(D), rtol=1e-5, atol=1e-5)


def test_transformer_xl_projection_per_layer_biases_shared():
    pe = tiny_gpt("transformer_xl", n_layer=3).pe
    assert pe.w_r.shape == (3, 32, 32) and pe.u.shape == pe.v.shape == (4, 8)


# ---- Kerple -----------------------------------------------------------------------------
def test_kerple_biases_by_hand():
    r1, r2 = torch.tensor([0.5, 2.0]), torch.tensor([1.0, 0.25])
    d = torch.tensor([0, 1, 4])
    log = kerple_bias(d, r1, r2, "log")
    power = kerple_bias(d, r1, r2, "power")
    assert log[:, 0].tolist() == [0.0, 0.0] and power[:, 0].tolist() == [0.0, 0.0]   # distance 0: the kernel's 0
    torch.testing.assert_close(log[:, 1:], torch.tensor([[-0.5 * math.log(2), -0.5 * math.log(5)],
                                                         [-2 * math.log(1.25), -2 * math.log(2)]]))
    torch.testing.assert_close(power[:, 1:], torch.tensor([[-0.5, -2.0], [-2.0, -2 * 4 ** 0.25]]))


@pytest.mark.parametrize("variant", ["log", "power"])
def test_kerple_in_the_model_uses_clamped_per_head_parameters(variant):
    pe = tiny_gpt("kerple", kerple_variant=variant).pe
    pe.r1.data = torch.tensor([1.0, -3.0, 0.3, 2.0])     # a negative r1 is clamped to EPS
    pe.r2.data = torch.tensor([0.5, 1.0, 5.0, 0.1])      # power: r2 = 5 is clamped to 2
    bias = pe.dense_bias(torch.arange(6, 8), torch.arange(0, 8))          # (H, 2, 8)
    r1, r2 = [1.0, 1e-2, 0.3, 2.0], [0.5, 1.0, 5.0 if variant == "log" else 2.0, 0.1]
    for h in range(4):
        assert bias[h, 1, 7].item() == 0.0
        want = -r1[h] * (math.log(1 + r2[h] * 7) if variant == "log" else 7 ** r2[h])
        assert bias[h, 1, 0].item() == pytest.approx(want, rel=1e-5)


def test_kerple_unknown_variant():
    with pytest.raises(ValueError, match="kerple_variant must be one of log, power"):
        tiny_gpt("kerple", kerple_variant="exp")


# ---- FIRE -------------------------------------------------------------------------------
def test_fire_input_by_hand():
    c, L = torch.tensor(0.5), torch.tensor(4.0)
    x = fire_input(torch.tensor([2, 9]), torch.arange(10), c, L)          # (2, 10)
    psi = lambda t: math.log(0.5 * t + 1)
    assert x[0, 0].item() == pytest.approx(psi(2) / psi(4), rel=1e-5)    # i = 2 < L: normalised by psi(L)
    assert x[1, 0].item() == pytest.approx(psi(9) / psi(9), rel=1e-5)    # i = 9 > L: by psi(i), so 1 at j = 0
    assert x[1, 5].item() == pytest.approx(psi(4) / psi(9), rel=1e-5)
    assert x[0, 2].item() == 0 and x[1, 9].item() == 0 and x[0, 5].item() == 0   # distance 0, future key


def test_fire_bias_at_distance_zero_is_mlp_of_zero():
    pe = tiny_gpt("fire").pe
    w1, b1, w2, b2 = pe.mlp[0].weight, pe.mlp[0].bias, pe.mlp[2].weight, pe.mlp[2].bias
    f0 = w2 @ torch.relu(b1) + b2                                           # f(0) = W2 relu(W1 0 + b1) + b2, (H,)
    q_pos = torch.tensor([0, 5, 31, 500])                                   # below and far above L
    bias = pe.dense_bias(q_pos, torch.arange(501))                          # (H, 4, 501)
    for a, i in enumerate(q_pos.tolist()):
        torch.testing.assert_close(bias[:, a, i], f0)
    x = fire_input(q_pos, torch.arange(501), pe.c, pe.L)[2, 7]              # one more point, through the MLP by hand
    torch.testing.assert_close(bias[:, 2, 7], w2 @ torch.relu(w1[:, 0] * x + b1) + b2)


def test_fire_bias_is_the_same_when_computed_in_row_blocks():
    pe = tiny_gpt("fire").pe
    q_pos, k_pos = torch.arange(100, 400), torch.arange(400)                # 300 query rows: two blocks of <= 256
    bias = pe.dense_bias(q_pos, k_pos)
    for a in (0, 255, 256, 299):
        torch.testing.assert_close(bias[:, a], pe.dense_bias(q_pos[a:a + 1], k_pos)[:, 0])


def test_fire_mlp_by_its_pieces_is_the_mlp_values_and_gradients():
    """f evaluated piece by piece equals the ReLU MLP: at random inputs, at its knots, outside [0, 1], with a
    unit whose weight is 0 (no knot) and two units sharing a knot; and so do the gradients of every weight."""
    from positional.fire import by_pieces, pieces
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    with torch.no_grad():
        mlp[0].weight[0, 0], mlp[0].bias[0] = 0.0, 0.7        # always on, no knot
        mlp[0].weight[1, 0], mlp[0].bias[1] = 0.0, -0.2       # always off
        mlp[0].weight[2:4, 0], mlp[0].bias[2:4] = torch.tensor([2.0, -4.0]), torch.tensor([-1.0, 2.0])  # both at 0.5
    knots = pieces(mlp)[0]
    assert torch.isinf(knots[-2:]).all() and (knots[:-2].diff() >= 0).all()
    x = torch.cat([knots[:-2], torch.tensor([0.0, 1.0])])
    torch.testing.assert_close(by_pieces(mlp, x), mlp(x[:, None]).T, rtol=1e-5, atol=1e-6)   # (H, n)
    x = (torch.rand(200) * 3 - 1).requires_grad_()                       # gradients away from the kinks
    want = mlp(x[:, None]).T
    got = by_pieces(mlp, x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    w = torch.randn_like(want)
    grads = torch.autograd.grad((want * w).sum(), [x, *mlp.parameters()])
    for g, r in zip(torch.autograd.grad((got * w).sum(), [x, *mlp.parameters()]), grads):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)


# ---- capability --------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(positional.REGISTRY))
def test_linear_attention_takes_an_encoding_only_when_it_loses_nothing(name):
    """Linear attention never forms the score matrix: an encoding it accepts has scores that are the
    rotated queries' and keys' dot products (nothing in a bias or its own logits is dropped); any other
    is refused in one line naming it."""
    if positional.REGISTRY[name].needs_score_matrix:
        with pytest.raises(ValueError, match=re.escape(f"the {name} encoding acts on the attention score matrix")):
            GPT(GPTConfig(n_layer=1, n_head=4, n_embd=32, vocab_size=40, pos_encoding=name, attention="linear"))
        return
    pe = tiny_gpt(name, attention="linear").pe
    q, k = torch.randn(2, 1, 4, 8, 8).unbind(0)
    pos = torch.arange(8)
    dots = rotate(pe, q, pos) @ rotate(pe, k, pos, key=True).transpose(-1, -2) / math.sqrt(8)
    m = visible(pos, pos)
    torch.testing.assert_close(scores(pe, q, k, pos, pos)[..., m], dots[..., m])


# ---- linear attention ----------------------------------------------------------------------
def at(pos):
    return Ctx(pos, pos)


def quadratic_linear_attention(q, k, v, pe, pos):
    """The same attention written with the explicit causal (T, T) matrices."""
    fq, fk = feature_map(q), feature_map(k)
    num = rotate(pe, fq, pos) @ rotate(pe, fk, pos, key=True).transpose(-1, -2)   # (B, H, T, T)
    den = fq @ fk.transpose(-1, -2)
    causal = torch.tril(torch.ones(len(pos), len(pos), dtype=torch.bool))
    num, den = num * causal, den * causal
    return (num @ v) / den.sum(-1, keepdim=True)


@pytest.mark.parametrize("name", ["rope", "xpos", "none"])
def test_linear_prefix_sums_equal_quadratic_form(name):
    pe = tiny_gpt(name).pe
    q, k, v = torch.randn(3, 2, 4, 12, 8, dtype=torch.float64).unbind(0)
    pos = torch.arange(20, 32)
    want = quadratic_linear_attention(q, k, v, pe, pos)
    for chunk in (1, 5, 64):                                                # pure recurrence, chunked, one chunk
        y, _ = causal_linear_attention(q, k, v, pe, at(pos), chunk=chunk)
        torch.testing.assert_close(y, want.to(y.dtype), rtol=1e-5, atol=1e-6)
    y1, state = causal_linear_attention(q[:, :, :5], k[:, :, :5], v[:, :, :5], pe, at(pos[:5]), chunk=3)   # two calls
    y2, _ = causal_linear_attention(q[:, :, 5:], k[:, :, 5:], v[:, :, 5:], pe, at(pos[5:]), state)
    torch.testing.assert_close(torch.cat([y1, y2], 2), y, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_linear_rope_invariant_to_shifting_positions(name):
    pe = tiny_gpt(name).pe
    q, k, v = torch.randn(3, 2, 4, 10, 8).unbind(0)
    a, _ = causal_linear_attention(q, k, v, pe, at(torch.arange(0, 10)))
    b, _ = causal_linear_attention(q, k, v, pe, at(torch.arange(1000, 1010)))
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    c, _ = causal_linear_attention(q, k.flip(2), v, pe, at(torch.arange(0, 10)))
    assert not torch.allclose(a, c)                                          # but order matters


LINEAR = [name for name, cls in positional.REGISTRY.items() if not cls.needs_score_matrix]   # what it accepts


@pytest.mark.parametrize("name", LINEAR)
def test_linear_model_cache_causality_and_generation(name):
    """Every encoding linear attention takes, the state it keeps for a generation (conv, rnn, Floater)
    included: the cached calls equal the full forward, reset restarts, later tokens change nothing
    earlier, and generation runs past the block."""
    model = tiny_gpt(name, attention="linear")
    idx = torch.randint(0, 40, (2, 24))
    with torch.no_grad():
        full = model(idx)[0]
        model.setup_cache(2, 32)
        out = torch.cat([model(c)[0] for c in [idx[:, :5], idx[:, 5:9]] + list(idx[:, 9:].split(1, 1))], 1)
        torch.testing.assert_close(out, full, rtol=1e-5, atol=1e-5)
        model.reset_cache()                                                  # a new sequence restarts the sums
        torch.testing.assert_close(model(idx[:, :7])[0], full[:, :7], rtol=1e-5, atol=1e-5)
        model.clear_cache()
        idx2 = idx.clone()
        idx2[:, 11] = (idx[:, 11] + 1) % 40
        other = model(idx2)[0]
    torch.testing.assert_close(other[:, :11], full[:, :11], rtol=0, atol=1e-6)
    assert not torch.allclose(other[:, 11], full[:, 11])
    out = model.generate(torch.zeros(1, 4, dtype=torch.long), 40, top_k=5, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, 44)


def test_linear_model_trains_a_step():
    model = tiny_gpt("rope", attention="linear").train()
    idx = torch.randint(0, 40, (2, 16))
    _, loss = model(idx, idx)
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", NEW + ["t5", "alibi"])
def test_linear_attention_refuses_score_matrix_encodings(name):
    with pytest.raises(ValueError, match=f"the {name} encoding acts on the attention score matrix"):
        GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, vocab_size=10, pos_encoding=name, attention="linear"))
    with pytest.raises(ConfigError, match="linear attention never forms"):
        load_config([f"--pos_encoding={name}", "--attention=linear"])


def test_attention_config_errors():
    with pytest.raises(ConfigError, match="attention must be one of softmax, linear, got 'lin'"):
        load_config(["--attention=lin"])
    with pytest.raises(ConfigError, match="linear attention has no window"):
        load_config(["--attention=linear", "--window=8"])
    with pytest.raises(ConfigError, match="kerple_variant must be one of log, power"):
        load_config(["--pos_encoding=kerple", "--kerple_variant=exp"])


@pytest.mark.slow
def test_cli_refuses_linear_attention_with_alibi(tiny_data, tmp_path):
    r = run_py("train.py", "configs/alibi.py", "--attention=linear", *TINY_ARGS, f"--data_dir={tiny_data}",
               f"--out_dir={tmp_path}", check=False)
    assert r.returncode == 2 and r.stderr.strip().startswith("error: the alibi encoding acts on the attention")
    assert len(r.stderr.strip().splitlines()) == 1 and not os.path.exists(tmp_path / "ckpt.pt")


# ---- training smoke -------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("config", NEW + ["linear_rope"])
def test_training_loss_falls(tiny_data, tmp_path, config):
    trained(config, tiny_data, tmp_path)                                    # and the checkpoint rebuilds


def test_transformer_xl_rows_follow_a_fused_optimizer_step():
    """The projected rows kept for inference are rebuilt after training updates W_R, also by
    fused AdamW (which does not bump the version counter): eval after a step equals a fresh
    model with the same weights."""
    from model import GPT, GPTConfig
    torch.manual_seed(0)
    cfg = GPTConfig(block_size=16, vocab_size=11, n_layer=1, n_head=2, n_embd=16, pos_encoding="transformer_xl")
    m = GPT(cfg)
    x = torch.randint(0, 11, (2, 16))
    m.eval()
    with torch.no_grad():
        m(x, x)                                             # fills the rows
    m.train()
    opt = m.configure_optimizers(0.0, 1e-1, (0.9, 0.95), "cpu")
    m(x, x)[1].backward()
    opt.step()
    m.eval()
    fresh = GPT(cfg)
    fresh.load_state_dict(m.state_dict())
    fresh.eval()
    with torch.no_grad():
        torch.testing.assert_close(m(x, x)[1], fresh(x, x)[1])
