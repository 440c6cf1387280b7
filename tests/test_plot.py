"""measure/encoding_plots.py: the numbers behind each picture against formulas, and every figure
written as a readable PNG."""
import math

import pytest
import torch

import positional
from measure import encoding_plots as plot, plots
from model import GPTConfig
from positional.alibi import ALiBi, alibi_slopes
from positional.base import Ctx
from positional.nope import NoPE
from positional.rope import RoPE
from positional.sinusoidal import Sinusoidal, sinusoidal_table
from positional.t5 import T5Bias, relative_position_bucket
from positional.xpos import XPos
from tests.conftest import run_py

PNG = b"\x89PNG\r\n\x1a\n"


def test_rope_decay_bound_at_zero_and_by_hand():
    # m = 0: S_i = i, so the mean over i = 1..d/2 is (d/2 + 1) / 2 = 32.5 for d = 128
    assert plot.rope_decay_bound([0], head_dim=128).item() == pytest.approx(32.5)
    # d = 4, m = 1: theta = (1, 0.01); |S_1| = 1, |S_2| = |e^i + e^0.01i| = 2 cos(0.495)
    assert plot.rope_decay_bound([1], head_dim=4).item() == pytest.approx((1 + 2 * math.cos(0.495)) / 2)
    far = plot.rope_decay_bound(torch.arange(500, 1000), head_dim=128)
    assert far.max() < 32.5 / 2  # the long-range decay the picture is about
    # a larger base keeps more of the bound at long range (the point of raising the base)
    assert plot.rope_decay_bound(torch.arange(200, 1000), 128, 1e6).mean() > far.mean()


def test_expected_logits_rope_and_xpos_by_hand():
    D, n = 8, 40
    m = torch.arange(n, dtype=torch.float64)[:, None]
    theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    # E[<R_L x, R_{L-m} x>] = tr(R_m) = sum_j 2 cos(m theta_j), divided by sqrt(D)
    want = (2 * torch.cos(m * theta)).sum(-1) / math.sqrt(D)
    torch.testing.assert_close(plot.expected_logits(RoPE(D), n, D).double(), want, atol=1e-5, rtol=1e-5)
    # xPos: pair j also decays by zeta_j^(m / gamma)
    zeta = (torch.arange(0, D, 2, dtype=torch.float64) / D + 0.4) / 1.4
    want = (2 * torch.cos(m * theta) * zeta ** (m / 16.0)).sum(-1) / math.sqrt(D)
    torch.testing.assert_close(plot.expected_logits(XPos(D, scale_base=16.0), n, D).double(), want,
                               atol=1e-5, rtol=1e-5)


def test_expected_logits_bias_and_embedding_by_hand():
    D, H, n = 8, 4, 30
    dist = torch.arange(n, dtype=torch.float32)
    # no position signal: E[|x|^2] / sqrt(D) at every distance
    torch.testing.assert_close(plot.expected_logits(NoPE(), n, D), torch.full((n,), math.sqrt(D)))
    # ALiBi: that, plus the mean over heads of -slope * distance
    want = math.sqrt(D) - alibi_slopes(H).mean() * dist
    torch.testing.assert_close(plot.expected_logits(ALiBi(H), n, D), want, atol=1e-5, rtol=1e-5)
    # sinusoidal: each head sees its D channels of g * table: (D + g^2 mean_h <p_L,h, p_L-m,h>) / sqrt(D)
    pe = Sinusoidal(D * H)
    with torch.no_grad():
        pe.gain.fill_(0.7)
    table = sinusoidal_table(n, D * H).double()
    dots = (table[-1].view(H, D) * table.flip(0).view(n, H, D)).sum(-1).mean(-1)  # (n,) by distance
    want = (D + 0.49 * dots) / math.sqrt(D)
    torch.testing.assert_close(plot.expected_logits(pe, n, D).double(), want, atol=1e-5, rtol=1e-5)


class AffineLogits(NoPE):
    """Logits q.k / sqrt(D) + <w, k> - c * distance: a linear term whose mean is 0."""
    def attend(self, q, k, v, ctx, layer):
        return ctx.softmax(self.logits(q, k, ctx, layer), v)[0]

    def logits(self, q, k, ctx, layer):
        dist = (ctx.q_pos[:, None] - ctx.k_pos[None, :]).float()                # (Tq, Tk)
        w = torch.arange(k.shape[-1], dtype=k.dtype)
        return q @ k.transpose(-1, -2) / math.sqrt(k.shape[-1]) + (k @ w)[..., None, :] - 0.5 * dist


def test_expected_logits_through_own_logits():
    D = 8
    want = math.sqrt(D) - 0.5 * torch.arange(20.0)
    torch.testing.assert_close(plot.expected_logits(AffineLogits(), 20, D), want, atol=1e-5, rtol=1e-5)


def test_bias_by_distance_alibi_and_t5():
    bias = plot.bias_by_distance(ALiBi(4), 50)
    assert bias.shape == (4, 50)
    torch.testing.assert_close(bias, -alibi_slopes(4)[:, None] * torch.arange(50.0)[None, :])
    t5 = T5Bias(2, num_buckets=8, max_distance=20)
    with torch.no_grad():
        t5.table.weight.copy_(torch.arange(16.0).view(8, 2))
    buckets = relative_position_bucket(-torch.arange(30), 8, 20)
    torch.testing.assert_close(plot.bias_by_distance(t5, 30), t5.table.weight[buckets].T)
    assert plot.bias_by_distance(RoPE(8), 10) is None


def test_position_table():
    table = plot.position_table(Sinusoidal(16), 10)
    torch.testing.assert_close(table, 0.02 * math.sqrt(2) * sinusoidal_table(10, 16))   # initial gain
    assert plot.position_table(ALiBi(2), 10) is None


@pytest.mark.parametrize("name", list(positional.REGISTRY))
def test_position_table_of_every_encoding(name):
    """A table only where the embedding adds one (a content-dependent embed has none): the report draws every
    trained encoding, and conv's trained model once broke it."""
    pe = positional.build(GPTConfig(block_size=16, n_head=2, n_embd=16, pos_encoding=name))
    table = plot.position_table(pe, 12)
    additive = name in ("learned", "sinusoidal", "floater")
    assert (table is not None) == additive, name
    if additive:
        pos, x = torch.arange(12), torch.randn(1, 12, 16)
        torch.testing.assert_close(pe.embed(x, Ctx(pos, pos))[0], x[0] + table)


def test_scaled_inv_freq_interpolates_and_extrapolates():
    base = plot.scaled_inv_freq(32, 10000.0)
    torch.testing.assert_close(plot.scaled_inv_freq(32, 10000.0, "linear", 4.0, 64), base / 4)  # PI: all interpolated
    yarn = plot.scaled_inv_freq(32, 10000.0, "yarn", 4.0, 4096) / base
    # YaRN keeps pairs that turn > beta_fast times in the original length (the fastest:
    # 4096 / 2pi) and interpolates those that turn < beta_slow times (the slowest: 0.12)
    assert yarn[0].item() == pytest.approx(1.0) and yarn[-1].item() == pytest.approx(0.25)


@pytest.mark.slow
def test_draw_all_writes_every_figure(tmp_path):
    paths = plots.draw_all(str(tmp_path), head_dim=16, n_head=4, length=64, bases=(1e4, 1e5))
    assert {"rope_decay", "rope_angles", "expected_logits", "alibi_bias", "sinusoidal_similarity"} <= set(paths)
    for path in paths.values():
        data = open(path, "rb").read()
        assert data.startswith(PNG) and len(data) > 5000, path
    t5 = T5Bias(3)
    with torch.no_grad():
        t5.table.weight.normal_()
    data = open(plot.draw_bias_per_head(str(tmp_path / "t5.png"), plot.bias_by_distance(t5, 200), "t5"), "rb").read()
    assert data.startswith(PNG) and len(data) > 5000


@pytest.mark.slow
def test_cli(tmp_path):
    r = run_py("-m", "measure.plots", f"--out={tmp_path}", "--head_dim=16", "--length=64", "--n_head=2")
    assert len(r.stdout.split()) >= 5 and all(p.endswith(".png") for p in r.stdout.split())
    r = run_py("-m", "measure.plots", f"--out={tmp_path}", "--head_dim=15", check=False)
    assert r.returncode == 2 and r.stderr.strip().startswith("error: need an even --head_dim")
    assert len(r.stderr.strip().splitlines()) == 1


def test_expected_logits_of_transformer_xl_with_several_heads():
    """expected_logits feeds one-head q, k to its logits; Transformer-XL broadcasts them
    to its heads. Its mean over heads equals the mean of per-head logits formed by hand."""
    from positional.transformer_xl import TransformerXL
    torch.manual_seed(0)
    pe = TransformerXL(n_layer=1, n_head=4, n_embd=32)
    with torch.no_grad():
        for p in pe.parameters():
            p.normal_(0, 0.3)
    n, D = 40, 8
    got = plot.expected_logits(pe, n, D)
    q = torch.randn(3, 1, 1, D)
    k = q.expand(-1, 1, n, D)
    ctx = Ctx(torch.tensor([n - 1]), torch.arange(n))
    ref = pe.logits(q.expand(-1, 4, -1, -1), k.expand(-1, 4, -1, -1), ctx, 0)
    assert got.shape == (n,) and torch.isfinite(got).all()
    torch.testing.assert_close(pe.logits(q, k, ctx, 0), ref)


def test_the_entropy_probe_builds_its_mask_on_the_scores_device(monkeypatch):
    """L1: with no mask in the plan, the probe's causal mask is made on the device of q and k (here "meta",
    standing in for CUDA), not on the CPU."""
    from types import SimpleNamespace
    import model as model_module
    monkeypatch.setattr(model_module, "attend", lambda q, k, v, plan, layer=0: v)   # the kernel is not under test
    got = []
    q = torch.empty(1, 2, 5, 4, device="meta")
    with plots.attention_probe(got.append):
        model_module.attend(q, q, q, SimpleNamespace(mask=None, pe=None))
    assert len(got) == 1 and got[0].shape == (1, 2, 5, 5) and got[0].device.type == "meta"
