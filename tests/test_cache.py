"""model.py's caches as generation uses them: linear attention's constant-size state, learned's
cache while the text fits its table, a cache never left behind by an exception, what encodings
keep for a generation held by the cache and gone with it, and Transformer-XL's decode step
projecting only what it needs."""
import pytest
import torch

from generate import Decoder
from tests.conftest import tiny_gpt


def buffers(cache):
    return {n: (tuple(b.shape), b.data_ptr()) for n, b in cache.named_buffers()}


def test_linear_attention_cache_does_not_grow_with_the_length():
    model = tiny_gpt("rope", attention="linear")
    short, long = buffers(model.setup_cache(2, 16)), buffers(model.setup_cache(2, 100_000))
    assert {n: s for n, (s, _) in short.items()} == {n: s for n, (s, _) in long.items()}
    assert set(short) == {"S", "z"} and short["S"][0] == (2, 2, 4, 8, 8)    # (L, B, H, D, D): no k/v buffers
    seen = []
    out = model.generate(torch.zeros(1, 3, dtype=torch.long), 60, top_k=5, generator=torch.Generator().manual_seed(0),
                         on_token=lambda _: seen.append(buffers(model.kv_cache)))
    assert out.shape == (1, 63) and len(seen) == 60
    assert set(seen[0]) == {"S", "z"} and all(b == seen[0] for b in seen)   # the same state buffers at every step


def test_linear_attention_cache_matches_full_forward_after_reset():
    model = tiny_gpt("xpos", attention="linear")
    idx = torch.randint(0, 40, (2, 20))
    with torch.no_grad():
        full = model(idx)[0]
        model.setup_cache(2, 0)                               # max_len means nothing to linear attention
        model(torch.randint(0, 40, (2, 7)))                   # another sequence, then a reset
        model.reset_cache()
        out = torch.cat([model(idx[:, :6])[0]] + [model(idx[:, t:t + 1])[0] for t in range(6, 20)], 1)
    torch.testing.assert_close(out, full, rtol=1e-5, atol=1e-5)


def greedy_recompute(model, idx, n, limit):
    """nanoGPT's generate with top_k=1: the whole (cropped) context at every step."""
    for _ in range(n):
        with torch.no_grad():
            logits = model(idx[:, -limit:])[0][:, -1]
        idx = torch.cat([idx, logits.argmax(-1, keepdim=True)], 1)
    return idx


@pytest.mark.parametrize("static", [True, False])
def test_learned_generation_uses_the_cache_while_the_text_fits_its_table(monkeypatch, static):
    model = tiny_gpt("learned", block_size=16)
    prompt = torch.randint(0, 40, (2, 4))
    want = greedy_recompute(model, prompt, 30, 16)
    lengths, run = [], model.run
    monkeypatch.setattr(model, "run", lambda idx, *a, **kw: lengths.append(idx.shape[1]) or run(idx, *a, **kw))
    got = model.generate(prompt, 30, top_k=1, static=static)
    assert torch.equal(got, want) and model.kv_cache is None
    # prefill 4, one cached token per step up to position 16, then the sliding 16-token window
    assert lengths == [4] + [1] * 12 + [16] * 17


def test_generation_with_a_prompt_longer_than_the_table_slides_from_the_start():
    model = tiny_gpt("learned", block_size=16)
    prompt = torch.randint(0, 40, (1, 20))
    assert torch.equal(model.generate(prompt, 5, top_k=1), greedy_recompute(model, prompt, 5, 16))


@pytest.mark.parametrize("name", ["rope", "learned"])
def test_an_exception_inside_generate_leaves_no_cache(name):
    model = tiny_gpt(name, block_size=16)
    idx = torch.randint(0, 40, (1, 10))

    def stop(token):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        model.generate(idx[:, :3], 8, on_token=stop)
    assert model.kv_cache is None
    with torch.no_grad():
        after = model(idx)[0]                                  # a fresh sequence, not the interrupted one
        fresh = tiny_gpt(name, block_size=16)(idx)[0]
    torch.testing.assert_close(after, fresh, rtol=0, atol=0)


def test_transformer_xl_decode_projects_only_the_new_distances():
    model = tiny_gpt("transformer_xl")
    idx = torch.randint(0, 40, (1, 30))
    with torch.no_grad():
        full = model(idx)[0]
        cache = model.setup_cache(1, 30)
        out, rows = [model(idx[:, :6])[0]], []
        for t in range(6, 30):
            out.append(model(idx[:, t:t + 1])[0])
            rows.append([(getattr(cache, n).data_ptr(), len(getattr(cache, n))) for n in cache.states.values()])
    torch.testing.assert_close(torch.cat(out, 1), full, rtol=1e-5, atol=1e-5)
    assert all(7 <= n < 14 for _, n in rows[0]) and all(30 <= n < 60 for _, n in rows[-1])   # rows double
    grown = [t for t in range(1, len(rows)) if rows[t][0][0] != rows[t - 1][0][0]]
    assert len(grown) <= 3   # reallocated when the rows double, not at each step


def test_transformer_xl_rows_follow_a_weight_update():
    model = tiny_gpt("transformer_xl")
    idx = torch.randint(0, 40, (1, 12))
    with torch.no_grad():
        before = model(idx)[0]
        model.pe.w_r.mul_(1.5)                                  # as an optimizer step would
        got = model(idx)[0]
        want = tiny_gpt("transformer_xl")
        want.load_state_dict(model.state_dict())
        fresh = want(idx)[0]                                    # the same path as got (no gradients): bitwise
    assert not torch.allclose(before, got)
    torch.testing.assert_close(got, fresh, rtol=0, atol=0)


def held(model):
    """Elements of every tensor the model's modules hold: buffers, parameters, tensors in their dicts."""
    n = sum(t.numel() for t in model.buffers()) + sum(p.numel() for p in model.parameters())
    for m in model.modules():
        for v in vars(m).values():
            values = v.values() if isinstance(v, dict) and not isinstance(v, torch.nn.Module) else []
            n += sum(t.numel() for t in values if isinstance(t, torch.Tensor))
            n += sum(x.numel() for t in values if isinstance(t, tuple) for x in t if isinstance(x, torch.Tensor))
    return n


@pytest.mark.parametrize("name", ["transformer_xl", "fox"])
@pytest.mark.parametrize("static", [True, False])
def test_what_an_encoding_keeps_for_a_generation_goes_with_it(name, static):
    """Transformer-XL's projected rows and FoX's running sums live in the cache: after generate,
    the model holds what it held before (they used to stay on the encoding: ~3.7 GB after
    100k tokens at 12x768), and a Decoder's kept cache holds no state either."""
    model = tiny_gpt(name, window=4)
    prompt = torch.randint(0, 40, (1, 3))
    with torch.no_grad():
        model(torch.zeros(1, 43, dtype=torch.long))             # the encodings' tables grown for 43 positions
    before = held(model)
    model.generate(prompt, 40, static=static)
    assert held(model) == before
    d = Decoder(model, static=static)
    d.generate(prompt, 40)
    assert held(model) == before and (d.cache is None or d.cache.states == {})


def test_transformer_xl_windowed_decode_matches_the_windowed_forward():
    W, S = 6, 2
    model = tiny_gpt("transformer_xl", window=W, sinks=S)
    idx = torch.randint(0, 40, (1, 4 * W + 5))
    with torch.no_grad():
        model.setup_cache(1, 0)
        steps = [model(idx[:, :5])[0]] + [model(idx[:, t:t + 1])[0] for t in range(5, idx.shape[1])]
        model.clear_cache()
        full = model(idx)[0]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


def test_the_cache_takes_the_compute_dtype_under_autocast():
    """B3: under bfloat16 autocast the keys and values are bfloat16, so the cache holds them as they are made
    (half the memory of float32, no cast at each write); outside autocast it takes the weights' dtype."""
    model = tiny_gpt("rope")
    prompt = torch.zeros(1, 4, dtype=torch.long)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        cache = model.setup_cache(1, 16)
        assert cache.k0.dtype == torch.bfloat16
        model(prompt)
        assert model.new_cache(1, 16).v0.dtype == torch.bfloat16   # the static step's (generate.Decoder)
        out = model.generate(prompt, 4, top_k=1)
    assert out.shape == (1, 8)
    assert model.setup_cache(1, 16).k0.dtype == torch.float32
