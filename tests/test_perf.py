"""The fast attention paths give what the plain reference path gives, for every encoding:
in training (loss and every gradient) and in cached generation; the bias is built once per
forward; a compiled model agrees with the eager one."""
import dataclasses
import json
import math
import types
import warnings

import pytest
import torch

import bench
import model as model_mod
import positional
from attention import flex as flex_mod
from attention import long_cpu
from attention.flex import Flex
from attention.plan import AttentionPlan, choose_kernel
from tests.conftest import tiny_gpt

ALL = list(positional.REGISTRY)


ATTEND = model_mod.attend


def reference_attend(q, k, v, plan, layer=0):
    """softmax(q k^T / sqrt(D) + mask) v, written out in float64: the plain path every
    kernel must match. plan: an AttentionPlan, or its mask: None (causal, Tq == Tk),
    bool (Tq, Tk) or float (H, Tq, Tk). An encoding's own logits are its own (pe.attend)."""
    if isinstance(plan, AttentionPlan) and plan.pe is not None and plan.pe.overrides("attend"):
        return ATTEND(q, k, v, plan, layer)
    mask = plan.mask if isinstance(plan, AttentionPlan) else plan
    Tq, Tk = q.shape[2], k.shape[2]
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])   # (B, H, Tq, Tk)
    if mask is None:
        mask = torch.ones(Tq, Tk, dtype=torch.bool).tril()
    s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    return (torch.softmax(s, dim=-1) @ v.double()).to(q.dtype)


def mask_of(bias, pos, window=0, sinks=0):
    """The mask a plan over keys at the queries' own positions adds: bias (H, T, T) with -inf where hidden."""
    return AttentionPlan(pos, pos, window, sinks, causal=True, bias=bias).mask


def sharp_gpt(name, **kw):
    """tiny_gpt with large query/key weights, so that attention is far from uniform and a
    wrong scale, bias or mask changes the outputs well beyond float tolerance."""
    m = tiny_gpt(name, **kw)
    with torch.no_grad():
        for block in m.h:
            block.attn.c_attn.weight.normal_(0, 0.3)
    return m


def loss_and_grads(m, x, y):
    m.zero_grad(set_to_none=True)
    _, loss = m(x, y)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("window", [0, 5])
def test_training_fast_path_matches_reference(name, window, monkeypatch):
    m = sharp_gpt(name, window=window).train()
    x, y = torch.randint(40, (3, 24)), torch.randint(40, (3, 24))
    fast_loss, fast = loss_and_grads(m, x, y)
    monkeypatch.setattr(model_mod, "attend", reference_attend)
    ref_loss, ref = loss_and_grads(m, x, y)
    torch.testing.assert_close(fast_loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert fast.keys() == ref.keys() and len(fast) > 0
    for n in ref:
        torch.testing.assert_close(fast[n], ref[n], rtol=1e-4, atol=1e-5, msg=lambda s: f"{n}: {s}")
    if any(p.requires_grad for p in m.pe.parameters()) and name != "learned":
        assert all(n in fast for n, _ in m.named_parameters() if n.startswith("pe."))  # a learned bias gets gradients


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_generation_fast_path_matches_reference(name, monkeypatch):
    m = sharp_gpt(name)
    prompt = torch.randint(40, (2, 5))
    fast = m.generate(prompt, 20, generator=torch.Generator().manual_seed(3))
    m.setup_cache(2, 25)  # and the cached logits themselves, step by step
    fast_logits = [m(prompt)[0]] + [m(fast[:, t:t + 1])[0] for t in range(5, 24)]
    monkeypatch.setattr(model_mod, "attend", reference_attend)
    ref = m.generate(prompt, 20, generator=torch.Generator().manual_seed(3))
    m.setup_cache(2, 25)
    ref_logits = [m(prompt)[0]] + [m(fast[:, t:t + 1])[0] for t in range(5, 24)]
    assert torch.equal(fast, ref)
    torch.testing.assert_close(torch.cat(fast_logits, 1), torch.cat(ref_logits, 1), rtol=1e-5, atol=1e-5)


def saves_a_score_matrix(m, x):
    """Whether a training forward of m on x (B, T) keeps a per-example (B, H, T, T) tensor for the backward pass."""
    B, T = x.shape
    H = m.config.n_head
    found = []

    def pack(t):
        found.append(t.dim() >= 3 and tuple(t.shape[-2:]) == (T, T) and t.numel() >= B * H * T * T)
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        m.train()(x, x)
    return any(found)


def fixed_scores(name):
    """True when the encoding's scores are q.k plus a bias that needs no gradient (or none): no logits of its own."""
    pe = tiny_gpt(name).pe
    pos = torch.arange(8)
    bias = pe.dense_bias(pos, pos)
    return not pe.overrides("attend") and (bias is None or not bias.requires_grad)


@pytest.mark.parametrize("name", [n for n in ALL if fixed_scores(n)])
@pytest.mark.parametrize("window", [0, 5])
def test_training_keeps_no_score_matrix_when_nothing_needs_its_gradient(name, window):
    """The memory the fused kernels are chosen for: training an encoding whose scores are q.k plus a fixed
    bias (none, rotations, ALiBi, windows) keeps nothing of size (B, H, T, T) for the backward pass, so its
    activations grow with T, not T^2. A learned bias (T5) does keep one on CPU: the check can fail."""
    x = torch.randint(40, (3, 24))
    assert not saves_a_score_matrix(tiny_gpt(name, window=window), x)
    assert saves_a_score_matrix(tiny_gpt("t5", window=window), x)


@pytest.mark.parametrize("name", ["t5", "alibi"])
def test_bias_is_built_once_per_forward(name, monkeypatch):
    m = tiny_gpt(name, n_layer=3).train()
    calls = []
    bias = m.pe.dense_bias
    monkeypatch.setattr(m.pe, "dense_bias", lambda q, k: calls.append(1) or bias(q, k))
    x = torch.randint(40, (2, 16))
    m(x, x)[1].backward()
    assert len(calls) == 1
    m.eval()
    m.setup_cache(2, 20)
    with torch.no_grad():
        m(x)
        m(x[:, :1])
    assert len(calls) == 3  # prefill and one decode step: once each


def plan(T, Tk=None, bias=None, window=0, dropout=0.0, flex=True, device="cpu"):
    """An AttentionPlan for T queries at the end of Tk keys (on `device`, without allocating there)."""
    Tk = Tk or T
    on = torch.empty(0, device=device)
    q_pos, k_pos = torch.arange(Tk - T, Tk).to(on.device), torch.arange(Tk).to(on.device)
    return AttentionPlan(q_pos, k_pos, window, causal=T == Tk, bias=bias, dropout=dropout,
                                   flex=working_flex() if flex else None)


def working_flex():
    """A model's FlexAttention known to work on CUDA (as a probe there would find)."""
    f = Flex()
    f.errors["cuda"] = None
    return f


def on_cuda(p):
    """A copy of plan p's fields whose positions say they are on CUDA (what choose_kernel reads)."""
    fields = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    return types.SimpleNamespace(**{**fields, "q_pos": FakeCuda(p.q_pos)})


class FakeCuda:
    """Positions that say they are on CUDA (the choice reads only is_cuda, the device and the length)."""
    is_cuda = True
    device = "cuda"

    def __init__(self, t):
        self.t = t

    def __len__(self):
        return len(self.t)


def test_a_failing_flex_attention_is_found_by_its_probe_once_and_left_for_the_model(monkeypatch):
    """FlexAttention's availability is decided before a forward takes it, once per device: a probe that
    fails gives one warning, and the model's plans take SDPA there from then on."""
    calls = []

    def broken(*a, **kw):
        calls.append(1)
        raise RuntimeError("no kernel")
    monkeypatch.setattr(flex_mod, "attention", broken)
    model = tiny_gpt("alibi")
    with pytest.warns(UserWarning, match="FlexAttention failed"):
        assert not model.flex.usable("cpu")
    assert not model.flex.usable("cpu") and calls == [1]     # probed once
    assert isinstance(model.flex.errors["cpu"], RuntimeError)
    p = plan(4, bias=torch.zeros(2, 4, 4))
    p.flex.errors["cuda"] = RuntimeError("no kernel")                   # as a probe on CUDA would find
    assert choose_kernel(on_cuda(p)) != "flex"                        # the failed device is left for good


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alibi", "t5", "fire"])
def test_flex_attention_score_mod_matches_reference(name):
    """The flex path's score_mod (the encoding's score_bias at gathered positions) and block mask,
    run by FlexAttention's eager CPU version."""
    pe = tiny_gpt(name, n_head=2, n_embd=32).pe
    pos = torch.arange(40)
    p = AttentionPlan(pos, pos, 9, 2, causal=True, pe=pe, flex=Flex())
    q, k, v = (torch.randn(1, 2, 40, 16) * 2 for _ in range(3))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        got = model_mod.flex_attention(q, k, v, p, compiled=False)
    torch.testing.assert_close(got, reference_attend(q, k, v, mask_of(pe.dense_bias(pos, pos), pos, 9, 2)),
                               rtol=1e-4, atol=1e-5)


def test_explicit_attention_matches_reference_with_long_alibi_bias():
    """float32 at 16x a 64-token block: the explicit path stays within float tolerance."""
    pe = tiny_gpt("alibi", n_head=4).pe
    T = 1024
    pos = torch.arange(T)
    mask = mask_of(pe.dense_bias(pos, pos), pos)     # (H, T, T)
    q, k, v = (torch.randn(1, 4, T, 8) for _ in range(3))
    want = reference_attend(q, k, v, mask)
    torch.testing.assert_close(model_mod.explicit_attention(q, k, v, mask), want, rtol=1e-4, atol=1e-5)
    p = AttentionPlan(pos, pos, causal=True, bias=pe.dense_bias(pos, pos))
    assert p.kernel == "sdpa"
    torch.testing.assert_close(model_mod.attend(q, k, v, p), want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_compiled_model_matches_eager():
    m = sharp_gpt("t5", n_layer=1)
    x = torch.randint(40, (2, 16))
    with torch.no_grad():
        want = m(x)[0]
        got = torch.compile(m)(x)[0]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_bench_runs_train_and_eval_and_writes_json(tmp_path, capsys):
    out = tmp_path / "b.json"
    bench.main(["--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=8", "--batch_size=2", "--rounds=2",
                "--steps=1", "--encodings=none,t5,learned", f"--json={out}"])
    r = json.loads(out.read_text())
    assert set(r["train"]) == {"none", "t5", "learned"} and r["train"]["none"]["ratio_to_none"] == 1.0
    assert all(f["ms"] > 0 and f["cpu_ms"] > 0 for f in r["train"].values())
    assert set(r["eval"]["t5"]) == {"8", "32", "128"} and set(r["eval"]["learned"]) == {"8"}   # its table ends at 8
    assert r["eval"]["t5"]["128"]["tokens_per_s"] == pytest.approx(2 * 128 / r["eval"]["t5"]["128"]["s"])
    printed = capsys.readouterr().out
    assert "training step:" in printed and "evaluation forward" in printed and "n/a" in printed


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_fast_rotation_gradient_is_the_inverse_rotation(fraction):
    """RoPE/xPos rotate through a custom autograd Function: check it against finite
    differences, with scaled tables as xPos uses them (cos, sin not on the unit circle)."""
    from positional.rope import rotate_half_split
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    r2 = int(8 * fraction) // 2
    cos, sin = torch.randn(5, r2, dtype=torch.float64), torch.randn(5, r2, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: rotate_half_split(t, cos, sin), (x,))
    want = torch.cat((x[..., :r2] * cos - x[..., r2:2 * r2] * sin, x[..., r2:2 * r2] * cos + x[..., :r2] * sin,
                      x[..., 2 * r2:]), dim=-1)
    torch.testing.assert_close(rotate_half_split(x, cos, sin), want)


def test_shaw_one_hot_form_matches_the_gather(monkeypatch):
    """Training reads Shaw's tables through a one-hot product (batch x heads >= k + 1):
    the same loss and gradients as the gather and scatter_add used elsewhere."""
    m = sharp_gpt("shaw").train()
    x, y = torch.randint(40, (6, 24)), torch.randint(40, (6, 24))
    assert m.pe.one_hot(torch.arange(4), torch.arange(4), 6 * 4, torch.float32) is not None
    fast_loss, fast = loss_and_grads(m, x, y)
    monkeypatch.setattr(type(m.pe), "one_hot", lambda *a: None)
    ref_loss, ref = loss_and_grads(m, x, y)
    torch.testing.assert_close(fast_loss, ref_loss, rtol=1e-6, atol=1e-6)
    for n in ref:
        torch.testing.assert_close(fast[n], ref[n], rtol=1e-5, atol=1e-6, msg=lambda s: f"{n}: {s}")


def test_transformer_xl_strided_shift_matches_the_gather(monkeypatch):
    from positional import transformer_xl
    m = sharp_gpt("transformer_xl").train()
    x, y = torch.randint(40, (3, 24)), torch.randint(40, (3, 24))
    pos = torch.arange(5, 29)
    assert transformer_xl.queries_at_the_end(pos, pos) and transformer_xl.queries_at_the_end(pos[20:], pos)
    assert not transformer_xl.queries_at_the_end(pos, torch.arange(24)) and not \
        transformer_xl.queries_at_the_end(torch.tensor([0, 2, 3]), torch.tensor([0, 2, 3]))
    fast_loss, fast = loss_and_grads(m, x, y)
    monkeypatch.setattr(transformer_xl, "queries_at_the_end", lambda q, k: False)
    ref_loss, ref = loss_and_grads(m, x, y)
    torch.testing.assert_close(fast_loss, ref_loss, rtol=1e-6, atol=1e-6)
    for n in ref:
        torch.testing.assert_close(fast[n], ref[n], rtol=1e-5, atol=1e-6, msg=lambda s: f"{n}: {s}")


def test_kerple_and_fire_tables_match_the_bias_at_each_pair():
    """Their networks run once per distance (FIRE: for the queries before L) and are read at
    each (i, j): the numbers of the formula at each pair, queries past L and decode steps included."""
    from positional.fire import fire_input
    from positional.kerple import kerple_bias
    kerple = tiny_gpt("kerple").pe
    fire = tiny_gpt("fire", fire_init_L=20).pe          # queries from 20 on have their own normaliser
    sparse = torch.tensor([0, 3, 7, 30])
    for q_pos, k_pos in [(torch.arange(40), torch.arange(40)), (torch.arange(30, 33), torch.arange(33)),
                         (torch.tensor([39]), torch.arange(40)), (sparse, sparse)]:
        want = kerple_bias((q_pos[:, None] - k_pos[None, :]).abs(), *kerple.params(), kerple.variant)
        torch.testing.assert_close(kerple.dense_bias(q_pos, k_pos), want, rtol=0, atol=0)
        want = fire.mlp(fire_input(q_pos, k_pos, fire.c, fire.L)[..., None]).permute(2, 0, 1)
        torch.testing.assert_close(fire.dense_bias(q_pos, k_pos), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("T", [64, 200, 256])
def test_explicit_attention_in_causal_blocks_matches_the_full_square(T):
    """Query blocks that leave out the keys hidden from all of them (keys at the queries' own
    positions): the same output and gradients as the full (Tq, Tk) square."""
    pe = tiny_gpt("t5", n_head=2).pe
    pos = torch.arange(T)
    assert len(long_cpu.causal_blocks(T)) == min(4, T // 64)
    q, k, v = (torch.randn(2, 2, T, 8, requires_grad=True) for _ in range(3))
    grads = []
    for causal in (True, False):
        mask = mask_of(pe.dense_bias(pos, pos), pos, window=T // 3, sinks=2)   # (H, T, T)
        y = model_mod.explicit_attention(q, k, v, mask, causal=causal)
        y.backward(torch.ones_like(y))
        grads.append((y.detach(), *(t.grad.clone() for t in (q, k, v)), *(p.grad.clone() for p in pe.parameters())))
        for t in (q, k, v, *pe.parameters()):
            t.grad = None
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[1][0], reference_attend(q, k, v, mask), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ALL if positional.REGISTRY[n].overrides("attend")])
def test_own_scores_by_query_block_match_the_full_square(name, monkeypatch):
    """At T = 200 (3 query blocks) an encoding that forms its own scores gives the loss and
    gradients of one full square (the blocks leave out only keys hidden from them)."""
    m = sharp_gpt(name, block_size=200).train()
    x, y = torch.randint(40, (6, 200)), torch.randint(40, (6, 200))
    assert len(long_cpu.causal_blocks(200)) == 3
    fast_loss, fast = loss_and_grads(m, x, y)
    monkeypatch.setattr(long_cpu, "causal_blocks", lambda T: [(0, T)])
    ref_loss, ref = loss_and_grads(m, x, y)
    torch.testing.assert_close(fast_loss, ref_loss, rtol=1e-5, atol=1e-6)
    for n in ref:
        torch.testing.assert_close(fast[n], ref[n], rtol=1e-4, atol=1e-6, msg=lambda s: f"{n}: {s}")
