"""Behaviour of every encoding inside the model: invariances, causality, KV cache."""
import pytest
import torch

import positional
from model import MLP, GPTConfig
from positional.alibi import alibi_slopes
from tests.conftest import embedded, rotate, tiny_gpt

ALL = list(positional.REGISTRY)
# every encoding, and the settings that change an encoding's form, as (name, settings): checked as an encoding is
FORMS = {**{n: (n, {}) for n in ALL}, "path_w_rank=4": ("path", dict(path_w_rank=4))}
RELATIVE = ["t5", "alibi", "rope", "xpos"]


def logits_between(pe, q, k, q_pos, k_pos):
    """Attention logits (B, H, Tq, Tk) as the model forms them, before the causal mask."""
    s = rotate(pe, q, q_pos) @ rotate(pe, k, k_pos, key=True).transpose(-1, -2)
    b = pe.dense_bias(q_pos, k_pos)
    return s if b is None else s + b


@pytest.mark.parametrize("name", RELATIVE)
@pytest.mark.parametrize("shift", [1, 37, 1000])
def test_relative_scores_invariant_to_shift(name, shift):
    pe = tiny_gpt(name).pe
    q, k = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 9, 8)
    q_pos, k_pos = torch.arange(3, 9), torch.arange(0, 9)
    a = logits_between(pe, q, k, q_pos, k_pos)
    b = logits_between(pe, q, k, q_pos + shift, k_pos + shift)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["learned", "sinusoidal"])
def test_absolute_embeddings_do_depend_on_position(name):
    pe = tiny_gpt(name).pe
    e = embedded(pe, torch.arange(8), 32)
    assert e.shape == (8, 32) and not torch.allclose(e[0], e[5])


def test_rope_preserves_norms_and_is_identity_at_zero():
    pe = tiny_gpt("rope").pe
    x = torch.randn(2, 4, 10, 8)
    pos = torch.arange(990, 1000)
    torch.testing.assert_close(rotate(pe, x, pos).norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rotate(pe, x[:, :, :1], torch.tensor([0])), x[:, :, :1])


def test_rope_matches_explicit_2d_rotations():
    """Half-split pairing: channel j pairs with j + d/2 and turns by m * base^(-2j/d)."""
    pe = positional.RoPE(head_dim=4, base=100.0)
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 1, 1, 4)
    m = 3
    out = rotate(pe, x, torch.tensor([m])).flatten()
    want = []
    for j, theta in enumerate([1.0, 0.1]):
        a, b = x.flatten()[j], x.flatten()[j + 2]
        c, s = torch.cos(torch.tensor(m * theta)), torch.sin(torch.tensor(m * theta))
        want.append((a * c - b * s, a * s + b * c))
    torch.testing.assert_close(out, torch.stack([want[0][0], want[1][0], want[0][1], want[1][1]]))


def test_partial_rotary_leaves_the_rest_untouched():
    pe = tiny_gpt("rope", rotary_fraction=0.5).pe
    x = torch.randn(1, 4, 5, 8)
    y = rotate(pe, x, torch.arange(40, 45))
    assert torch.equal(y[..., 4:], x[..., 4:]) and not torch.allclose(y[..., :4], x[..., :4])


def test_alibi_bias_is_minus_slope_times_distance():
    pe = tiny_gpt("alibi", n_head=6, n_embd=48).pe
    q_pos, k_pos = torch.arange(5, 8), torch.arange(0, 8)
    bias = pe.dense_bias(q_pos, k_pos)
    slopes = alibi_slopes(6)
    for h in range(6):
        for a, i in enumerate(q_pos.tolist()):
            for j in range(i + 1):
                assert bias[h, a, j].item() == pytest.approx(-slopes[h].item() * (i - j))


def test_t5_bias_is_shared_table_lookup():
    model = tiny_gpt("t5")
    pe = model.pe
    bias = pe.dense_bias(torch.arange(40, 42), torch.arange(0, 42))     # (H, 2, 42)
    assert bias.shape == (4, 2, 42)
    assert torch.equal(bias[:, 1, 41], pe.table.weight[0])              # distance 0 -> bucket 0
    assert torch.equal(bias[:, 1, 0], pe.table.weight[23])              # distance 41: 16 + floor(16 log(41/16) / log 8)
    assert sum(p.numel() for p in pe.parameters()) == 32 * 4            # one table for all layers


@pytest.mark.parametrize("form", FORMS)
def test_causality(form):
    """Changing the token at t changes no logits before t."""
    name, settings = FORMS[form]
    model = tiny_gpt(name, **settings)
    idx = torch.randint(0, 40, (2, 20))
    t = 11
    idx2 = idx.clone()
    idx2[:, t] = (idx[:, t] + 1) % 40
    with torch.no_grad():
        a, b = model(idx)[0], model(idx2)[0]
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t], b[:, t])


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kw", [{}, dict(window=6, sinks=1, ssmax=True)], ids=["full", "window"])
def test_documents_see_only_themselves_with_the_kv_cache(form, kw):
    """With the cache, document ids are kept with the keys: a prefill and single-token steps give the
    logits of one forward with the same ids, and changing any token of an earlier document leaves the
    later documents' logits unchanged (up to FoX's rounding: its cached sums run on across documents)."""
    name, settings = FORMS[form]
    model = tiny_gpt(name, block_size=160, **kw, **settings)
    idx = torch.randint(0, 40, (2, 24))
    changed = idx.clone()
    changed[:, 3], changed[:, 12] = (idx[:, 3] + 1) % 40, (idx[:, 12] + 1) % 40       # in documents 0 and 1
    spans = [(0, 10)] + [(t, t + 1) for t in range(10, 24)]                             # prefill into document 1

    def cached(x):
        model.setup_cache(2, 32)
        out = torch.cat([model(x[:, a:b], doc=DOCS[a:b])[0] for a, b in spans], dim=1)
        assert model.kv_cache.length == 24
        model.clear_cache()
        return out

    with torch.no_grad():
        full, a, b = model(idx, doc=DOCS)[0], cached(idx), cached(changed)
    torch.testing.assert_close(a, full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a[:, 16:], b[:, 16:], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, 7:16], b[:, 7:16])


BLOCKS = {"gpt2": {}, "llama": dict(norm="rmsnorm", mlp="swiglu", n_kv_head=2, tie_embeddings=False),
          "neox": dict(parallel_residual=True, bias=True)}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("block", BLOCKS)
def test_kv_cache_matches_full_forward(form, block):
    """Prefill and decode equal one forward, with GPT-2's block, a Llama block (GQA: the cache holds the
    2 key/value heads) and GPT-NeoX's parallel residual."""
    name, settings = FORMS[form]
    model = tiny_gpt(name, **settings, **BLOCKS[block])
    idx = torch.randint(0, 40, (2, 24))
    with torch.no_grad():
        full = model(idx)[0]
        cache = model.setup_cache(2, 32)
        chunks = [idx[:, :5], idx[:, 5:8]] + [idx[:, t:t + 1] for t in range(8, 24)]   # prefill, a chunk, then singles
        out = torch.cat([model(c)[0] for c in chunks], dim=1)
    torch.testing.assert_close(out, full, rtol=1e-5, atol=1e-5)
    assert cache.k0.shape[1] == (2 if block == "llama" else 4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
def test_static_decoding_with_grouped_query_attention(name):
    """The static step (a cache of n_kv_head heads) generates what the reference step does."""
    model = tiny_gpt(name, block_size=64, **BLOCKS["llama"])
    prompt = torch.randint(0, 40, (2, 5))
    assert torch.equal(model.generate(prompt, 20, top_k=1), model.generate(prompt, 20, top_k=1, static=False))


@pytest.mark.parametrize("name", ALL)
def test_generate_past_block_size(name):
    model = tiny_gpt(name, block_size=16)
    g = torch.Generator().manual_seed(0)
    out = model.generate(torch.zeros(1, 4, dtype=torch.long), 40, top_k=5, generator=g)
    assert out.shape == (1, 44) and model.kv_cache is None


def test_learned_refuses_positions_past_its_table():
    model = tiny_gpt("learned", block_size=16)
    with pytest.raises(ValueError, match="knows 16 positions"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("name", ALL)
def test_window_covering_everything_equals_full_attention(name):
    idx = torch.randint(0, 40, (1, 20))
    with torch.no_grad():
        full = tiny_gpt(name)(idx)[0]
        windowed = tiny_gpt(name, window=20)(idx)[0]
        narrow = tiny_gpt(name, window=4)(idx)[0]
    torch.testing.assert_close(windowed, full, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(narrow[:, 10:], full[:, 10:])


def test_unknown_encoding_lists_valid_ones():
    with pytest.raises(ValueError, match="valid: none, learned, sinusoidal, t5, alibi, rope, xpos"):
        positional.build(GPTConfig(pos_encoding="sinusoid"))


def test_odd_rotary_dimension_is_refused():
    with pytest.raises(ValueError, match="rotary dimension must be even"):
        tiny_gpt("rope", n_embd=24, n_head=2, rotary_fraction=0.25)   # 12 * 0.25 = 3 channels


DOCS = torch.tensor([0] * 7 + [1] * 9 + [2] * 8)                      # three documents in one row of 24


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("kw", [{}, dict(window=6, sinks=1, ssmax=True)], ids=["full", "window"])
def test_documents_see_only_themselves(name, kw):
    """With document ids, changing any token of an earlier document leaves the later documents'
    logits unchanged (no cache), and a document at positions restarting from 0 gives the logits it
    gives alone; in training too (the learned-bias and own-score paths, by query blocks)."""
    model = tiny_gpt(name, block_size=160, **kw)
    idx = torch.randint(0, 40, (2, 24))
    changed = idx.clone()
    changed[:, 3], changed[:, 12] = (idx[:, 3] + 1) % 40, (idx[:, 12] + 1) % 40       # in documents 0 and 1
    restart = torch.cat([torch.arange(7), torch.arange(9), torch.arange(8)])
    with torch.no_grad():
        a, b = model(idx, doc=DOCS)[0], model(changed, doc=DOCS)[0]
        own = model(idx, pos=restart, doc=DOCS)[0][:, 16:]
        alone = model(idx[:, 16:])[0]
    assert torch.equal(a[:, 16:], b[:, 16:]) and not torch.allclose(a[:, 7:16], b[:, 7:16])
    torch.testing.assert_close(own, alone, rtol=1e-5, atol=1e-5)
    model.train()
    docs = torch.arange(140) // 50                                     # 3 query blocks, documents across them
    x = torch.randint(0, 40, (1, 140))
    y = x.clone()
    y[:, 60] = (x[:, 60] + 1) % 40
    with torch.no_grad():
        first, second = model(x, doc=docs)[0], model(y, doc=docs)[0]
    assert torch.equal(first[:, 100:], second[:, 100:]) and not torch.equal(first[:, 60:100], second[:, 60:100])
    logits, loss = model(x, x, doc=docs)
    loss.backward()


def test_block_keys_shape_the_model_as_llama_does():
    """SwiGLU's hidden size is Llama's (8C/3 up to a multiple of 256: 11008 at C = 4096), mlp_hidden
    overrides it; untied embeddings are two tables; bad keys are one line each."""
    with torch.device("meta"):
        assert MLP(GPTConfig(n_embd=4096, mlp="swiglu")).c_fc.weight.shape == (2 * 11008, 4096)
        assert MLP(GPTConfig(n_embd=64, mlp="swiglu", mlp_hidden=96)).c_proj.weight.shape == (64, 96)
    m = tiny_gpt("rope", tie_embeddings=False, norm="rmsnorm")
    assert m.lm_head.weight is not m.wte.weight and isinstance(m.ln_f, torch.nn.RMSNorm)
    with pytest.raises(ValueError, match="n_kv_head=3 must divide n_head=4"):
        tiny_gpt("rope", n_kv_head=3)
    with pytest.raises(ValueError, match="norm must be layernorm or rmsnorm"):
        tiny_gpt("rope", norm="rms")


def test_embed_std_scales_the_token_embeddings_initial_values_only():
    """embed_std is wte's initial std (the tied head shares the table); every other weight keeps GPT-2's 0.02:
    with one seed the same draws, wte's 50 times larger at 1.0 than at 0.02."""
    gpt2, wide = tiny_gpt("rope"), tiny_gpt("rope", embed_std=1.0)
    assert torch.allclose(wide.wte.weight, 50 * gpt2.wte.weight) and wide.lm_head.weight is wide.wte.weight
    assert 0.9 < wide.wte.weight.std().item() < 1.1
    for (name, a), b in zip(gpt2.named_parameters(), wide.parameters()):
        assert name == "wte.weight" or torch.equal(a, b), name


# ---- no state written by a forward ------------------------------------------------------------
VARIANTS = {**FORMS, "dynamic": ("rope", dict(rope_scaling="dynamic", rope_factor=2.0)),
            "rerope": ("rope", dict(rope_scaling="rerope")), "rope_window": ("rope", dict(window=4, sinks=1))}


def held(pe):
    """Everything an encoding module holds: its plain attributes (the train/eval flag aside), and its
    parameters' and buffers' values."""
    plain = {k: v for m in pe.modules() for k, v in vars(m).items() if not k.startswith("_") and k != "training"}
    tensors = {n: t.detach().clone() for n, t in [*pe.named_parameters(), *pe.named_buffers()]}
    return plain, tensors


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("mode", ["eval", "train", "cache"])
def test_a_forward_writes_nothing_on_the_encoding(variant, mode):
    """What a generation keeps is the cache's: no forward (training with its backward, evaluation, a
    prefill and cached steps, a static generation) changes an attribute, parameter or buffer of an
    encoding, so no later call can read what an earlier one wrote."""
    name, kw = VARIANTS[variant]
    model = tiny_gpt(name, **kw)
    pes = list(model.encodings.values())
    before = [held(pe) for pe in pes]
    idx = torch.randint(0, 40, (2, 20))
    if mode == "train":
        model.train()(idx, idx)[1].backward()
    elif mode == "eval":
        with torch.no_grad():
            model(idx)
    else:
        model.setup_cache(2, 24)
        with torch.no_grad():
            model(idx[:, :12]), model(idx[:, 12:13])
        model.clear_cache()
        model.generate(idx[:, :5], 6, top_k=5, generator=torch.Generator().manual_seed(0))
    for pe, (plain, tensors) in zip(pes, before):
        now_plain, now_tensors = held(pe)
        assert now_plain.keys() == plain.keys()
        assert all(now_plain[k] is v or now_plain[k] == v for k, v in plain.items())
        assert now_tensors.keys() == tensors.keys() and all(torch.equal(now_tensors[n], t) for n, t in tensors.items())
