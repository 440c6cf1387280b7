"""The rest of the survey's family (issue #26): each encoding's formula by hand."""
import math

import pytest
import torch

from positional.base import Ctx
from tests.conftest import tiny_gpt, trained


def test_rope_learned_freq_at_alpha_zero_is_rope_and_alpha_gets_a_gradient():
    rope, learned = tiny_gpt("rope").pe, tiny_gpt("rope_learned_freq").pe
    with torch.no_grad():
        learned.alpha.zero_()
    q, ctx = torch.randn(2, 4, 9, 8, requires_grad=True), Ctx(torch.arange(3, 12), torch.arange(3, 12))
    torch.testing.assert_close(learned.rotate(q, ctx), rope.rotate(q, ctx))
    learned.rotate(q, Ctx(ctx.q_pos, ctx.k_pos)).square().mul(torch.randn(2, 4, 9, 8)).sum().backward()
    assert learned.alpha.grad is not None and learned.alpha.grad.abs().min() > 0
    with torch.no_grad():   # alpha_i = log 2 doubles frequency i: the angle at position m is 2 m theta_i
        learned.alpha.fill_(torch.log(torch.tensor(2.0)).item())
    m = torch.tensor([5])
    torch.testing.assert_close(learned.angles(m, learned.inv_freq), 2 * rope.angles(m, rope.inv_freq))


def test_multiplicative_scales_each_channel_by_its_position_vector():
    pe = tiny_gpt("multiplicative").pe
    x, pos = torch.randn(2, 5, 32), torch.tensor([0, 3, 4, 9, 31])
    torch.testing.assert_close(pe.embed(x, Ctx(pos, pos)), x * pe.p[pos][None])
    fresh = positional_build("multiplicative").p
    assert abs(fresh.mean().item() - 1) < 0.01 and fresh.std().item() < 0.05      # p ~ 1 at initialisation


def positional_build(name, **settings):
    import positional
    from model import GPTConfig
    return positional.build(GPTConfig(block_size=32, n_head=4, n_embd=32, pos_encoding=name, pos_settings=settings))


def test_conv_is_the_causal_sum_of_taps_and_its_cache_continues_it():
    pe = tiny_gpt("conv", conv_kernel=3).pe
    w, x = pe.w, torch.randn(1, 7, 32)
    want = torch.stack([sum(w[j] * x[0, t - j] for j in range(3) if t - j >= 0) for t in range(7)])[None]
    pos = torch.arange(7)
    torch.testing.assert_close(pe.embed(x, Ctx(pos, pos)), want)
    cache = tiny_gpt("conv", conv_kernel=3).new_cache(1, 7)
    parts = [pe.embed(x[:, a:b], Ctx(pos[a:b], pos[:b], cache=cache)) for a, b in [(0, 1), (1, 4), (4, 5), (5, 7)]]
    torch.testing.assert_close(torch.cat(parts, 1), want)
    doc = torch.tensor([0, 0, 0, 1, 1, 1, 1])                 # the second document starts with no taps behind it
    got = pe.embed(x, Ctx(pos, pos, doc=doc))
    torch.testing.assert_close(got[:, 3:], pe.embed(x[:, 3:], Ctx(pos[:4], pos[:4])))


def test_rnn_is_a_gru_cell_and_its_cache_holds_the_hidden_state():
    pe = tiny_gpt("rnn").pe
    cell = torch.nn.GRUCell(32, 32)
    with torch.no_grad():
        cell.weight_ih.copy_(pe.wx.weight), cell.bias_ih.copy_(pe.wx.bias)
        cell.weight_hh.copy_(pe.wh.weight), cell.bias_hh.copy_(pe.wh.bias)
    x, h, want = torch.randn(2, 6, 32), torch.zeros(2, 32), []
    for t in range(6):
        h = cell(x[:, t], h)
        want.append(x[:, t] + h)
    pos = torch.arange(6)
    with torch.no_grad():
        torch.testing.assert_close(pe.embed(x, Ctx(pos, pos)), torch.stack(want, 1))
        cache = tiny_gpt("rnn").new_cache(2, 6)
        parts = [pe.embed(x[:, a:b], Ctx(pos[a:b], pos[:b], cache=cache)) for a, b in [(0, 4), (4, 5), (5, 6)]]
    torch.testing.assert_close(torch.cat(parts, 1), torch.stack(want, 1))


def test_floater_rk4_of_a_linear_field_is_the_matrix_exponential():
    from positional.floater import rk4
    g = torch.Generator().manual_seed(0)   # its own draws: the bound below is for this field, whatever ran before
    M, p0 = 0.3 * torch.randn(6, 6, dtype=torch.float64, generator=g), torch.randn(6, dtype=torch.float64, generator=g)
    A = M - M.T - 0.1 * torch.eye(6, dtype=torch.float64)                        # rotating and decaying
    got = rk4(lambda p, t: A @ p, p0, 12, steps=8)
    want = torch.stack([torch.linalg.matrix_exp(A * k) @ p0 for k in range(12)])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-4)                     # the closed form, to RK4's error
    step = sum(torch.linalg.matrix_power(A / 8, i) / math.factorial(i) for i in range(5))   # RK4 on a linear field:
    exact = torch.stack([torch.linalg.matrix_power(step, 8 * k) @ p0 for k in range(12)])  # exp's Taylor to order 4
    torch.testing.assert_close(got, exact, rtol=1e-10, atol=1e-12)


def test_floater_sinusoidal_table_is_the_rotation_field_solution():
    from positional.floater import rk4
    from positional.sinusoidal import sinusoidal_table
    C = 16
    omega = 10000.0 ** (-torch.arange(0, C, 2, dtype=torch.float64) / C)        # (C/2,)
    A = torch.zeros(C, C, dtype=torch.float64)
    A[0::2, 1::2] = torch.diag(omega)                                             # d sin(ωt)/dt = ω cos(ωt)
    A[1::2, 0::2] = -torch.diag(omega)                                            # d cos(ωt)/dt = -ω sin(ωt)
    p0 = torch.tensor([0.0, 1.0] * (C // 2), dtype=torch.float64)
    got = rk4(lambda p, t: A @ p, p0, 20, steps=16)
    torch.testing.assert_close(got.float(), sinusoidal_table(20, C), rtol=0, atol=1e-5)


def test_floater_adds_the_solved_table_and_decodes_from_the_cached_one():
    pe = tiny_gpt("floater").pe
    x, pos = torch.randn(1, 4, 32), torch.tensor([2, 3, 4, 5])
    with torch.no_grad():
        torch.testing.assert_close(pe.embed(x, Ctx(pos, pos, n_positions=6)), x + pe.table(6)[2:])


def test_floater_solves_a_generation_s_rows_as_it_reaches_them():
    """A prompt solves the rows up to its last position, each one-token call its own row from the one before it
    (nothing ahead: the rows past it are still zero); the rows are the whole table's."""
    model = tiny_gpt("floater")
    pe, cache = model.pe, model.new_cache(1, 12)
    x, pos, table = torch.randn(1, 12, 32), torch.arange(12), pe.table(12).detach()
    with torch.no_grad():
        parts = [pe.embed(x[:, :5], Ctx(pos[:5], pos[:5], cache=cache, n_positions=12))]
        for t in range(5, 9):
            parts.append(pe.embed(x[:, t:t + 1], Ctx(pos[t:t + 1], pos[:t + 1], cache=cache, n_positions=12)))
        rows = pe.solved(Ctx(pos[8:9], pos[:9], cache=cache, n_positions=12))
    torch.testing.assert_close(torch.cat(parts, 1), x[:, :9] + table[:9])
    torch.testing.assert_close(rows[:9], table[:9])
    assert not rows[9:].any() and int(cache.state(pe, "done", None)) == 9


def test_complex_order_is_r_e_to_the_i_omega_k_plus_theta():
    pe = tiny_gpt("complex_order").pe
    x, pos = torch.randn(2, 5, 32), torch.tensor([0, 1, 7, 20, 100])
    r, w, theta = x @ pe.amplitude.weight.T, x @ pe.frequency.weight.T, x @ pe.phase.weight.T     # (B, T, C/2)
    z = r * torch.exp(1j * (w * pos[:, None] + theta))                          # r e^{i(ωk + θ)}
    torch.testing.assert_close(pe.embed(x, Ctx(pos, pos)), torch.cat([z.real, z.imag], -1), rtol=1e-5, atol=1e-5)


def test_deberta_log_buckets_by_hand():
    from positional.deberta import log_bucket
    d = torch.tensor([0, 1, 4, 5, 8, 16, 40, 127, 500])
    # mid = 4: exact to 4; then 4 + ceil(log(d/4) / log(127/4) * 3), capped at 7
    bucket_of_5 = 4 + math.ceil(math.log(5 / 4) / math.log(31.75) * 3)
    assert log_bucket(d, 8, 128).tolist() == [0, 1, 4, bucket_of_5, 5, 6, 6, 7, 7]


def test_deberta_c2p_and_p2c_match_an_explicit_t_t_d_computation():
    from positional.deberta import log_bucket
    model = tiny_gpt("deberta", deberta_buckets=8, deberta_max_distance=16)
    pe, layer = model.pe, 1
    q, k = torch.randn(1, 4, 10, 8), torch.randn(1, 4, 10, 8)
    pos = torch.arange(10)
    kr = (pe.rel @ pe.w_kr[layer]).view(8, 4, 8)                                  # (n, H, D)
    qr = (pe.rel @ pe.w_qr[layer]).view(8, 4, 8)
    d = (pos[:, None] - pos[None, :]).clamp(min=0)
    b = log_bucket(d, 8, 16)
    kr_ij, qr_ij = kr[b].permute(2, 0, 1, 3), qr[b].permute(2, 0, 1, 3)            # (H, T, T, D): the vector of δ(i, j)
    c2p = (q[0][:, :, None, :] * kr_ij).sum(-1)                                    # q_i · K^r[δ(i,j)]
    p2c = (k[0][:, None, :, :] * qr_ij).sum(-1)                                    # k_j · Q^r[δ(j,i)]
    want = (q[0] @ k[0].transpose(-1, -2) + c2p + p2c) / math.sqrt(24)
    torch.testing.assert_close(pe.logits(q, k, Ctx(pos, pos), layer)[0], want)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["rope_alibi", "rope_learned_freq", "multiplicative", "conv", "rnn", "floater",
                                    "complex_order", "deberta"])
def test_training_loss_falls_and_the_checkpoint_reloads(tiny_data, tmp_path, config):
    model = trained(config, tiny_data, tmp_path)[0]
    assert model.pe.name == config.replace("rope_alibi", "rope+alibi")
