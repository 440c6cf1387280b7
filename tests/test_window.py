"""Window attention with attention sinks, and the bounded KV cache (a ring) that samples with it."""
import pytest
import torch

from model import EMPTY, KVCache
from measure.evaluation import check_overrides
from training.config import ConfigError
from tests.conftest import tiny_gpt

W, S = 6, 2


@pytest.mark.parametrize("name", ["none", "sinusoidal", "t5", "alibi", "rope", "xpos"])
def test_bounded_cache_decodes_4x_the_window_like_a_recompute(name):
    """Cache size stays sinks + window - 1 + chunk while decoding 4x the window, and every step's
    logits equal a recompute of the whole prefix with the same keys visible."""
    model = tiny_gpt(name, window=W, sinks=S)
    idx = torch.randint(0, 40, (2, 4 * W + 5))
    with torch.no_grad():
        cache = model.setup_cache(2, 0)
        size = S + W - 1 + cache.chunk
        assert isinstance(cache, KVCache) and cache.k0.shape[2] == size
        steps, kept = [model(idx[:, :5])[0]], []
        for t in range(5, idx.shape[1]):
            steps.append(model(idx[:, t:t + 1])[0])
            kept.append(int((cache.slot_pos != EMPTY).sum()))
            assert all(b.shape[2] == size for n, b in cache.named_buffers() if n[0] in "kv")
        model.clear_cache()
        full = model(idx)[0]    # the same windowed visibility, recomputed over everything
    assert kept[-1] == size and sorted(cache.slot_pos[:S].tolist()) == list(range(S))   # the sinks stay
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


def test_sinks_change_what_is_seen_and_stay_in_the_cache():
    idx = torch.randint(0, 40, (1, 30))
    with torch.no_grad():
        a = tiny_gpt("alibi", window=W)(idx)[0]
        b = tiny_gpt("alibi", window=W, sinks=S)(idx)[0]
        model = tiny_gpt("rope", window=W, sinks=S)
        model.setup_cache(1, 0)
        model(idx)
    assert torch.allclose(a[:, :W], b[:, :W]) and not torch.allclose(a[:, W + 2:], b[:, W + 2:])
    kept = set(model.kv_cache.slot_pos.tolist())
    assert model.kv_cache.slot_pos[:S].tolist() == [0, 1] and set(range(30 - W + 1, 30)) <= kept


@pytest.mark.parametrize("static", [False, True])
def test_generate_with_a_window_keeps_memory_constant(static):
    model = tiny_gpt("rope", window=8, sinks=4)
    sizes = []
    out = model.generate(torch.zeros(1, 3, dtype=torch.long), 80, top_k=5,
                         generator=torch.Generator().manual_seed(0), static=static,
                         on_token=lambda _: sizes.append({tuple(b.shape) for n, b in model.kv_cache.named_buffers()
                                                          if n[0] in "kv" and n[1:].isdigit()}))
    # sinks + window - 1 keys, and room for a chunk of new tokens (16) more (the keys and values: RoPE's rows table,
    # a buffer too, is bounded by rope.TABLE_LIMIT positions)
    keys = 4 + 7 + 16
    assert out.shape == (1, 83) and all(s == sizes[0] for s in sizes)
    assert {s[-2] for s in sizes[0] if len(s) > 1} == {keys}


def test_window_below_one_is_refused(tmp_path):
    with pytest.raises(ValueError, match="window and sinks must be >= 0"):
        tiny_gpt("rope", window=-1)
    with pytest.raises(ConfigError, match="--window must be >= 1"):
        check_overrides({"window": 0})   # evaluation; in sample.py --window=0 means no window


def test_a_ring_refuses_explicit_positions_at_any_length():
    """B1: a windowed (ring) cache takes no explicit positions, whether a call fits one of the ring's chunks
    (16 tokens or fewer) or is split into them: the same one line for both, and nothing written."""
    model = tiny_gpt("rope", window=4)
    model.setup_cache(1, 64)
    assert model.kv_cache.period
    with torch.no_grad():
        for T in (8, 20):
            with pytest.raises(ValueError, match="explicit positions continue a KV cache in order"):
                model(torch.zeros(1, T, dtype=torch.long), pos=torch.arange(T))
            assert model.kv_cache.length == 0
