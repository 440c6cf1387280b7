"""Stick-breaking attention (positional/stick_breaking.py): its weights by hand, the remainder to the query's own
value, hidden keys breaking nothing, a ring cache decoding as the forward does. Causality, cache == recompute, shift
invariance and a training step come from the tests parametrised over positional.REGISTRY."""
import math

import torch

from positional.base import Ctx
from positional.stick_breaking import stick_breaking
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
