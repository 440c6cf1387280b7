"""SSMax (attention/temperature.py): softmax(s_h log(n) z) with n the keys a query sees, by hand; cached
decoding (full and bounded window caches) equals recompute; s_h is a learned, undecayed parameter."""
import math

import pytest
import torch
from torch.nn import functional as F

from positional.base import Ctx
from tests.conftest import assert_decodes_like_a_recompute, tiny_gpt


def key_counts(q_pos, k_pos, window=0, sinks=0):
    """n of each query, as the model counts them for SSMax, by blocks of 2 queries (and at once)."""
    ctx = Ctx(q_pos, k_pos, window, sinks)
    assert torch.equal(ctx.count_visible(block=2), ctx.visible().sum(-1).float())
    return ctx.count_visible(block=2).long()


def test_key_counts_by_blocks_keep_documents_and_rows():
    """A block's documents are its own rows' (rows of a query block of the model's), counted 3 queries at a time."""
    pos, doc = torch.tensor([0, 1, 2, 0, 1, 2, 3]), torch.tensor([0, 0, 0, 1, 1, 1, 1])
    ctx = Ctx(pos, pos, doc=doc)
    assert ctx.count_visible(block=3).tolist() == [1, 2, 3, 1, 2, 3, 4]
    part = Ctx(pos[4:], pos, doc=doc, rows=slice(4, 7))                        # the model's last query block
    assert part.count_visible(block=2).tolist() == part.visible().sum(-1).tolist() == [2, 3, 4]


def test_key_counts_by_hand():
    q = torch.tensor([0, 1, 2, 5])
    assert key_counts(q, torch.arange(6)).tolist() == [1, 2, 3, 6]                    # causal: position + 1
    assert key_counts(q, torch.arange(6), window=2, sinks=1).tolist() == [1, 2, 3, 3]  # keys 4, 5 and sink 0
    # training positions: tokens, not positions
    sampled = torch.tensor([0, 3, 7, 20])
    assert key_counts(sampled, sampled).tolist() == [1, 2, 3, 4]
    # bounded cache
    assert key_counts(torch.tensor([9]), torch.tensor([0, 1, 7, 8, 9]), window=3, sinks=2).tolist() == [5]


def test_ssmax_attention_is_softmax_of_s_log_n_times_the_logits():
    """One layer, NoPE: its attention output against softmax(s_h * log(n_i) * q.k / sqrt(D)) formed by hand."""
    model = tiny_gpt("none", n_layer=1, ssmax=True)
    attn = model.h[0].attn
    with torch.no_grad():
        attn.ssmax.copy_(torch.tensor([0.3, 0.7, 1.1, -0.2]))
    x = torch.randn(2, 10, 32)
    pos = torch.arange(10)
    with torch.no_grad():
        got = attn(x, model.pe, model.plans(pos, None, model.encodings)[model.schedule[0]])
        q, k, v = (t.view(2, 10, 4, 8).transpose(1, 2) for t in attn.c_attn(x).split(32, dim=2))   # (B, H, T, D)
        z = q @ k.transpose(-1, -2) / math.sqrt(8)                                                 # (B, H, T, T)
        scale = attn.ssmax[:, None, None] * torch.log(pos + 1.0)[None, :, None]                   # (H, T, 1)
        probs = F.softmax((scale * z).masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), -math.inf), -1)
        want = attn.c_proj((probs @ v).transpose(1, 2).reshape(2, 10, 32))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_ssmax_scales_are_learned_per_head_and_layer_without_decay():
    model = tiny_gpt("rope", ssmax=True, block_size=16)
    s = [b.attn.ssmax for b in model.h]
    assert all(p.shape == (4,) and torch.allclose(p, torch.full((4,), 1 / math.log(16))) for p in s)
    model.train()
    _, loss = model(torch.randint(0, 40, (2, 16)), torch.randint(0, 40, (2, 16)))
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in s)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    assert all(g["weight_decay"] == 0.0 for g in opt.param_groups if any(p is s[0] for p in g["params"]))


@pytest.mark.parametrize("name,window", [("rope", 0), ("alibi", 0), ("fox", 0), ("rope", 5), ("t5", 5)])
def test_ssmax_cache_equals_recompute(name, window):
    model = tiny_gpt(name, ssmax=True, window=window, sinks=2 if window else 0)
    with torch.no_grad():
        for b in model.h:
            b.attn.ssmax.normal_(0.5, 0.3)
    assert_decodes_like_a_recompute(model, torch.randint(0, 40, (2, 24)), prefill=5)


def test_ssmax_is_an_option_of_softmax_attention():
    with pytest.raises(ValueError, match="qk_norm, logn_scaling and ssmax are options of softmax attention"):
        tiny_gpt("rope", attention="linear", ssmax=True)


# ---- the attention-entropy picture (plots.py) ------------------------------------------------
def test_attention_entropy_of_uniform_attention_is_log_n():
    from measure.plots import attention_entropy
    model = tiny_gpt("none", n_layer=2)
    with torch.no_grad():
        for b in model.h:
            b.attn.c_attn.weight[:32].zero_()                   # q = 0: every visible key weighs the same
    h = attention_entropy(model, torch.randint(0, 40, (2, 12)))
    torch.testing.assert_close(h, torch.log(torch.arange(1, 13, dtype=torch.float64)), rtol=1e-6, atol=1e-6)
    windowed = tiny_gpt("none", n_layer=2, window=4)
    with torch.no_grad():
        for b in windowed.h:
            b.attn.c_attn.weight[:32].zero_()
    h = attention_entropy(windowed, torch.randint(0, 40, (2, 12)))
    torch.testing.assert_close(h, torch.log(torch.arange(1, 13, dtype=torch.float64).clamp(max=4)),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_plots_entropy_draws_each_checkpoint_with_and_without_log_n(tiny_data, tmp_path):
    from measure import plots
    from tests.conftest import TINY_ARGS
    from tests.inproc import run_train
    assert run_train([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path / 'run'}", "--max_iters=10"]) == 0
    curves, train_len = plots.entropy_curves([str(tmp_path / "run")], 64, str(tiny_data))
    (plain, h), (logn, h_logn) = curves.items()
    assert train_len == 16 and logn == plain + " + log-n" and h.shape == (64,)
    assert torch.equal(h[:16], h_logn[:16]) and (h_logn[16:] < h[16:]).all()   # sharper past L
    plots.main([f"--entropy={tmp_path / 'run'}", "--length=64", f"--data_dir={tiny_data}", f"--out={tmp_path}"])
    assert (tmp_path / "attention_entropy.png").stat().st_size > 0
