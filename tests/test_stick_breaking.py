"""Stick-breaking attention (positional/stick_breaking.py): its weights by hand, the remainder to the query's own
value, hidden keys breaking nothing, a ring cache decoding as the forward does. Causality, cache == recompute, shift
invariance and a training step come from the tests parametrised over positional.REGISTRY."""
import math

import pytest
import torch

from positional.base import Ctx
from positional.stick_breaking import CHUNK, stick_breaking, stick_breaking_dense, stick_breaking_truncated
from tests.conftest import assert_decodes_like_a_recompute, tiny_gpt


def test_weights_for_three_tokens_by_hand():
    """D = 1, q = 1, keys 0, ln 3, 0: z_2j = k_j, beta = sigmoid(z). Query 2 gives key 1 beta = 3/4, key 0
    (1/2) (1 - 3/4) = 1/8 and its own value the rest, 1/8; query 1 gives key 0 1/2 and itself 1/2."""
    q = torch.ones(1, 1, 3, 1, dtype=torch.float64)
    k = torch.tensor([0.0, math.log(3.0), 0.0], dtype=torch.float64).view(1, 1, 3, 1)
    v = torch.eye(3, dtype=torch.float64).view(1, 1, 3, 3)          # y_i = row i of the weights
    pos = torch.arange(3)
    y = stick_breaking(q, k, v, Ctx(pos, pos))[0, 0]
    want = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.125, 0.75, 0.125]], dtype=torch.float64)
    torch.testing.assert_close(y, want, rtol=0, atol=1e-12)


def loop_reference(q, k, v, seen):
    """The stick broken key by key, nearest first (the definition, no log space): (Tq, D) for one head."""
    z = q @ k.T / math.sqrt(q.shape[-1])
    out = torch.zeros(q.shape[0], v.shape[-1], dtype=q.dtype)
    for i in range(q.shape[0]):
        left = 1.0
        for j in range(i - 1, -1, -1):
            if seen[i, j]:
                b = torch.sigmoid(z[i, j])
                out[i] += left * b * v[j]
                left = left * (1 - b)
        out[i] += left * v[i]
    return out


def test_equals_the_definition_with_a_window_and_sinks():
    """Random q, k, v (float64): the log-space form equals breaking the stick key by key, hidden keys (outside a
    window of 3 but the first sink) taking nothing and breaking nothing."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, 9, 4, generator=g, dtype=torch.float64) * 2 for _ in range(3))
    pos = torch.arange(9)
    ctx = Ctx(pos, pos, window=3, sinks=1)
    y = stick_breaking(q, k, v, ctx)[0, 0]
    torch.testing.assert_close(y, loop_reference(q[0, 0], k[0, 0], v[0, 0], ctx.visible()), rtol=0, atol=1e-12)


def test_keys_in_any_slot_order_give_the_same_output():
    """A window's ring holds the keys out of position order: permuting the keys (and their positions) changes
    nothing."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g) for _ in range(3))
    pos = torch.arange(5)
    perm = torch.tensor([3, 0, 4, 1, 2])
    a = stick_breaking(q, k, v, Ctx(pos, pos))
    b = stick_breaking(q, k[:, :, perm], v[:, :, perm], Ctx(pos, pos[perm]))
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_window_ring_cache_decodes_like_a_recompute():
    """A window of 4 with a sink: the cache is a ring whose slots wrap several times over 30 tokens."""
    model = tiny_gpt("stick_breaking", block_size=64, window=4, sinks=1)
    idx = torch.randint(0, 40, (2, 30), generator=torch.Generator().manual_seed(2))
    assert_decodes_like_a_recompute(model, idx, prefill=3, max_len=30)
    assert model.kv_cache.period   # it was a ring


def test_attention_dropout_reaches_the_stick_breaking_weights():
    """dropout > 0 in training drops the weights (ctx.drop: two forwards differ), evaluation is deterministic."""
    model = tiny_gpt("stick_breaking", dropout=0.5, n_layer=1)
    idx = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        assert torch.equal(model(idx)[0], model(idx)[0])
        plan = model.train().plans(torch.arange(12), None, model.encodings)[model.schedule[0]]
        q, k, v = (torch.randn(2, 4, 12, 8, generator=torch.Generator().manual_seed(s)) for s in range(3))
        a, b = model.pe.attend(q, k, v, plan, 0), model.pe.attend(q, k, v, plan, 0)
    assert not torch.equal(a, b) and plan.dropout == 0.5


def long_ctx(T, Tq, kind, H=3):
    """The Ctx of the last Tq of T positions over all T keys, with a window, sinks, documents or per-head groups."""
    pos = torch.arange(T)
    if kind == "window":
        return Ctx(pos[T - Tq:], pos, window=40, sinks=3)
    if kind == "documents":
        doc = (pos // 70) % 3 + pos // 210                     # runs of 70 tokens; a document starts among the queries
        return Ctx(pos[T - Tq:], pos, doc=doc, rows=slice(T - Tq, T))
    if kind == "groups":                                       # an (H, Tq, Tk) visibility
        groups = torch.randint(0, 2, (H, T), generator=torch.Generator().manual_seed(5))
        return Ctx(pos[T - Tq:], pos, groups=groups, rows=slice(T - Tq, T))
    return Ctx(pos[T - Tq:], pos)


def qkv(T, Tq, scale, dtype, negative=False, seed=0):
    """q (2, 3, Tq, 8), k, v (2, 3, T, 8) at random; negative: every z_ij near -10 (no key takes a share worth
    breaking the stick: S stays below 1 over every key, the truncation cannot stop)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, Tq, 8, generator=g, dtype=dtype) * scale
    k, v = (torch.randn(2, 3, T, 8, generator=g, dtype=dtype) * scale for _ in range(2))
    if negative:
        q = torch.ones(2, 3, Tq, 8, dtype=dtype)
        k = -10 / math.sqrt(8) + 0.01 * k
    return q, k, v


@pytest.mark.parametrize("kind", ["causal", "window", "documents", "groups"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("scale, negative", [(1.0, False), (4.0, False), (1.0, True)], ids=["random", "large", "never"])
@pytest.mark.parametrize("T", [97, 300])
def test_truncated_equals_dense(kind, dtype, scale, negative, T):
    """The keys 32 at a time nearest first, stopping once every later weight is 0 by the FLOOR rule: the dense
    output (every pair), over lengths past several chunks, a window with sinks, documents and per-head
    visibilities, queries among the keys; z near -10 everywhere (never stops) too."""
    q, k, v = qkv(T, 50, scale, dtype, negative)
    ctx = long_ctx(T, 50, kind)
    tol = dict(rtol=0, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5 * scale)
    y = stick_breaking_truncated(q, k, v, ctx, chunk=32)
    torch.testing.assert_close(y, stick_breaking_dense(q, k, v, ctx), **tol)


def test_keys_in_ring_order_truncated_equals_dense():
    """Keys in slot order (a ring's), not position order: the chunks still go nearest first."""
    q, k, v = qkv(200, 4, 1.0, torch.float64)
    pos = torch.arange(200)
    perm = torch.randperm(200, generator=torch.Generator().manual_seed(6))
    ctx = Ctx(pos[196:], pos[perm], window=90, sinks=2)
    torch.testing.assert_close(stick_breaking_truncated(q, k[:, :, perm], v[:, :, perm], ctx, chunk=16),
                               stick_breaking(q, k, v, Ctx(pos[196:], pos, window=90, sinks=2)), rtol=0, atol=1e-12)


def test_without_gradients_past_a_chunk_of_keys_the_output_is_the_dense_one():
    """stick_breaking under no_grad (what evaluations and decoding run) over more than CHUNK keys: the dense
    output, for a block of queries and for one query (a decode step)."""
    T = 2 * CHUNK + 37
    for Tq in (16, 1):
        q, k, v = qkv(T, Tq, 1.0, torch.float32)
        ctx = long_ctx(T, Tq, "causal")
        with torch.no_grad():
            y = stick_breaking(q, k, v, ctx)
        torch.testing.assert_close(y, stick_breaking_dense(q, k, v, ctx), rtol=1e-5, atol=1e-5)


def test_far_keys_are_not_read_once_the_stick_is_spent():
    """Large logits spend the stick (sum of softplus past 60) within the first chunk for every row: the keys and
    values past the second chunk set to NaN change nothing (they are never read) and the output is the dense one of
    the real keys. Where no key breaks the stick (z near -10) the same NaN keys reach every output: all are read."""
    T, far = 400, 64
    for negative in (False, True):
        q, k, v = qkv(T, 8, 3.0, torch.float64, negative)
        ctx = long_ctx(T, 8, "causal")
        garbage_k, garbage_v = k.clone(), v.clone()
        garbage_k[:, :, :T - far], garbage_v[:, :, :T - far] = float("nan"), float("nan")   # all but the nearest 64
        y = stick_breaking_truncated(q, garbage_k, garbage_v, ctx, chunk=32)
        if negative:
            assert y.isnan().all()
        else:
            torch.testing.assert_close(y, stick_breaking_dense(q, k, v, ctx), rtol=0, atol=1e-12)


@pytest.mark.parametrize("path", [stick_breaking_dense, stick_breaking_truncated])
def test_extreme_logits_give_the_stick_whole_or_none(path):
    """z = +-1e4 (D = 1, q = 100, k = +-100): no NaN. Every z = -1e4: no key takes a share, y_i = v_i; the nearest
    key's z = +1e4: it takes the whole stick, y_i = v_(i-1); the nearest -1e4, the next +1e4: y_i = v_(i-2)."""
    T = 100
    q = torch.full((1, 1, T, 1), 100.0)
    v = torch.randn(1, 1, T, 4, generator=torch.Generator().manual_seed(7))
    pos = torch.arange(T)
    none = path(q, torch.full((1, 1, T, 1), -100.0), v, Ctx(pos, pos))
    torch.testing.assert_close(none, v, rtol=0, atol=0)
    k = torch.full((1, 1, T, 1), -100.0)
    k[..., 1::2, :] = 100.0                                    # odd keys: z = +1e4; a query sees both kinds
    ys = path(q[:, :, 1::2], k, v, Ctx(pos[1::2], pos))      # odd queries: the nearest key (even) has z = -1e4
    yd = path(q[:, :, 2::2], k, v, Ctx(pos[2::2], pos))      # even queries: the nearest (odd) has z = +1e4
    torch.testing.assert_close(yd, v[:, :, 1:-1:2], rtol=0, atol=0)
    torch.testing.assert_close(ys, torch.cat([v[:, :, 1:2], v[:, :, 1:-2:2]], 2), rtol=0, atol=0)   # v_(i-2); 1: v_1


def test_dropout_without_gradients_still_drops_past_a_chunk():
    """Attention dropout in training under no_grad, over more than CHUNK keys: the weights are still dropped (two
    calls differ), as the dense path does."""
    T = CHUNK + 20
    model = tiny_gpt("stick_breaking", dropout=0.5, n_layer=1, block_size=T)
    with torch.no_grad():
        plan = model.train().plans(torch.arange(T), None, model.encodings)[model.schedule[0]]
        q, k, v = (torch.randn(1, 4, T, 8, generator=torch.Generator().manual_seed(s)) for s in range(3))
        assert not torch.equal(model.pe.attend(q, k, v, plan, 0), model.pe.attend(q, k, v, plan, 0))


def test_model_without_gradients_equals_with_gradients_past_a_chunk():
    """A tiny model over CHUNK + 100 tokens: the logits without gradients (the truncated evaluation) equal those with
    gradients (the dense path)."""
    T = CHUNK + 100
    model = tiny_gpt("stick_breaking", block_size=T)
    idx = torch.randint(0, 40, (1, T), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        fast = model(idx)[0]
    torch.testing.assert_close(fast, model(idx)[0], rtol=1e-5, atol=1e-5)
