"""Generation (generate.py): the static decode step gives the reference path's logits (a full forward over the
whole text, no cache) and the reference generation's tokens, for every encoding, with and
without a window; the compiled step is what runs with compile=True and agrees too."""
import json

import pytest
import torch

import generate as decode
import positional
from model import KVCache
from tests.conftest import tiny_gpt

ALL = list(positional.REGISTRY)
WINDOWS = [dict(), dict(window=5, sinks=2)]


def step_logits(model, idx, prompt, **kw):
    """Logits (B, T - prompt + 1, vocab): after the prompt, then after each further token of idx, one at a time."""
    d = decode.Decoder(model, **kw)
    d.open(idx.shape[0], idx.shape[1], idx.device)
    out = [d.prefill(idx[:, :prompt])]
    out += [d.next(idx[:, t:t + 1]) for t in range(prompt, idx.shape[1])]
    d.close()
    return torch.stack(out, 1)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("kw", WINDOWS, ids=["full", "window"])
def test_static_step_matches_full_forward(name, kw):
    model = tiny_gpt(name, **kw)
    idx = torch.randint(0, 40, (2, 30))
    with torch.no_grad():
        full = model(idx)[0][:, 4:]                                    # (B, 26, vocab), no cache
        got = step_logits(model, idx, 5)
    assert model.kv_cache is None
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-5)
    if model.static_decoding and kw:   # a ring smaller than the text (its slots reused)
        cache = model.new_cache(2, 30)
        assert isinstance(cache, KVCache) and cache.size < 30


@pytest.mark.slow
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("kw", WINDOWS, ids=["full", "window"])
def test_static_generation_draws_the_reference_tokens(name, kw):
    model = tiny_gpt(name, **kw)
    prompt = torch.randint(0, 40, (2, 21))                             # longer than a ring's prefill chunk

    def gen(static):
        return model.generate(prompt, 40, 0.9, 20, torch.Generator().manual_seed(5), static=static)
    assert torch.equal(gen(True), gen(False))


ONE_QUERY = [n for n in ALL if positional.REGISTRY[n].overrides("one_query")]


@pytest.mark.parametrize("name", ONE_QUERY)
def test_a_decode_step_of_own_logits_goes_by_sdpa_over_moved_keys(name, monkeypatch):
    """One query with a cache: one_query's keys, values and bias through SDPA equal the logits' softmax (the full
    forward), with a window, sinks and a ring, and logits() is never called in a step."""
    assert {"shaw", "transformer_xl", "fox", "cope", "deberta"} <= set(ONE_QUERY)
    model = tiny_gpt(name, window=5, sinks=2)
    idx = torch.randint(0, 40, (2, 30))
    with torch.no_grad():
        full = model(idx)[0][:, 4:]
        d = decode.Decoder(model)
        d.open(2, 30, idx.device)
        out = [d.prefill(idx[:, :5])]
        cls = type(model.pe)
        monkeypatch.setattr(cls, "logits", lambda *a: (_ for _ in ()).throw(AssertionError("logits called")))
        out += [d.next(idx[:, t:t + 1]) for t in range(5, 30)]
        d.close()
    torch.testing.assert_close(torch.stack(out, 1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_generation_from_one_token_on_either_path(name):
    """A one-token prompt: the first forward with a cache is a decode step (what encodings keep is made there, one
    kept state from another's make), on the reference path and the static one, drawing the same tokens."""
    model = tiny_gpt(name, window=5, sinks=2)
    gen = lambda static: model.generate(torch.zeros(1, 1, dtype=torch.long), 12, 0.9, 20,  # noqa: E731
                                        torch.Generator().manual_seed(5), static=static)
    assert torch.equal(gen(True), gen(False))


def test_static_path_is_taken_where_the_encodings_allow_it(monkeypatch):
    """The capability decides, not the name: a length_dependent encoding gets the reference path."""
    model = tiny_gpt("alibi")
    assert decode.Decoder(model).static
    assert not decode.Decoder(tiny_gpt("rope", rope_scaling="dynamic", rope_factor=2.0)).static
    monkeypatch.setattr(type(model.pe), "length_dependent", True)
    assert not decode.Decoder(model).static and not decode.Decoder(model, compile=True).compile
    assert not decode.Decoder(tiny_gpt("rope", attention="linear")).static


def test_a_long_prompt_fills_a_ring_in_chunks():
    model = tiny_gpt("rope", window=6, sinks=1, block_size=128)
    idx = torch.randint(0, 40, (1, 100))
    with torch.no_grad():
        full = model(idx)[0][:, 59:]
        got = step_logits(model, idx, 60)                               # 60 > chunk: the ring is written in parts
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_the_compiled_step_runs_and_agrees():
    model = tiny_gpt("rope", n_layer=1)
    prompt = torch.randint(0, 40, (1, 3))
    d = decode.Decoder(model, compile=True)
    got = d.generate(prompt, 12, 0.9, 20, torch.Generator().manual_seed(2))
    want = model.generate(prompt, 12, 0.9, 20, torch.Generator().manual_seed(2), static=False)
    assert d.compile and d.compiled_steps == 11 and d.step is not decode.decode_step
    assert d.first_step_s > 0.05   # the compilation: dynamo and inductor take far longer than a step
    assert torch.equal(got, want)
    idx = torch.cat([prompt, got[:, 3:]], 1)
    with torch.no_grad():
        full = model(idx)[0][:, 2:]
    torch.testing.assert_close(step_logits(model, idx, 3, compile=True), full, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alibi", "fox", "transformer_xl"])   # the last two keep decoding state
@pytest.mark.parametrize("kw", WINDOWS, ids=["slot per position", "ring"])
def test_one_compiled_graph_serves_every_step(name, kw, monkeypatch):
    """One slot per position: the step attends over the slots written so far, a size the graph
    takes symbolically (not one compilation per token); a ring: all its slots, static shapes.
    A second generation of the same length reuses the graph (the encodings' state tensors are new).
    AOTAutograd's backend, with the guards inductor's graphs get."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="aot_eager", **kw))
    model = tiny_gpt(name, **kw)
    d = decode.Decoder(model, compile=True)
    before = counters["stats"]["unique_graphs"]
    for _ in range(2):
        d.generate(torch.randint(0, 40, (1, 4)), 24, 0.9, 20, torch.Generator().manual_seed(1))
    assert d.compiled_steps == 46 and counters["stats"]["unique_graphs"] - before == 1
    assert (d.cache.size < 28) == bool(kw)   # the ring: fewer slots than positions


@pytest.mark.slow
def test_a_cache_filled_to_its_last_position_needs_no_second_graph(monkeypatch):
    """learned, its 16 positions outgrown: the last compiled step attends over all 16 (then the
    text is re-encoded); that count is no special case for the graph (KVCache: one spare slot).
    AOTAutograd's backend: it is where the case would be told apart (dynamo's alone does not)."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="aot_eager", **kw))
    model = tiny_gpt("learned", block_size=16)
    d = decode.Decoder(model, compile=True)
    before = counters["stats"]["unique_graphs"]
    got = d.generate(torch.randint(0, 40, (1, 4)), 24, 0.9, 20, torch.Generator().manual_seed(1))
    assert d.compiled_steps == 12 and counters["stats"]["unique_graphs"] - before == 1
    assert torch.equal(got, model.generate(got[:, :4], 24, 0.9, 20, torch.Generator().manual_seed(1), static=False))


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ALL if tiny_gpt(n).static_decoding])  # the others: reference step
@pytest.mark.parametrize("kw", WINDOWS, ids=["full", "window"])
def test_every_static_step_compiles_whole_and_draws_the_reference_tokens(name, kw, monkeypatch):
    """fullgraph tracing with dynamo's eager backend: a step that reads a tensor back to the host
    (a graph break) fails here as it would under inductor, in a fraction of the time."""
    model = tiny_gpt(name, **kw)
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: real(fn, backend="eager", **kw))
    prompt = torch.randint(0, 40, (1, 7))
    d = decode.Decoder(model, compile=True)
    with torch._dynamo.config.patch(recompile_limit=256):   # a step per configuration, for the models of every test
        got = d.generate(prompt, 10, 0.9, 20, torch.Generator().manual_seed(3))
    assert d.compiled_steps == 9
    assert torch.equal(got, model.generate(prompt, 10, 0.9, 20, torch.Generator().manual_seed(3), static=False))


FAKE_NANOGPT = '''
from dataclasses import dataclass
import torch


@dataclass
class GPTConfig:
    block_size: int = 8
    vocab_size: int = 10
    n_layer: int = 1
    n_head: int = 1
    n_embd: int = 8
    dropout: float = 0.0
    bias: bool = True


class GPT(torch.nn.Module):
    """Stands in for nanoGPT's model.py: the same constructor and generate signature."""
    calls = 0

    def __init__(self, config):
        super().__init__()
        self.config = config

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        GPT.calls += 1
        return torch.cat([idx, torch.zeros(idx.shape[0], max_new_tokens, dtype=torch.long)], 1)
'''


@pytest.mark.slow
def test_bench_decode_section_with_a_nanogpt_folder(tmp_path, capsys):
    import bench
    (tmp_path / "nano").mkdir()
    (tmp_path / "nano" / "model.py").write_text(FAKE_NANOGPT)
    out = tmp_path / "b.json"
    bench.main(["--sections=decode", "--decode_shapes=1x2x16:8", "--gen_tokens=6", "--rounds=1",
                "--decode_encodings=alibi,rope,fox", "--decode_compile=False", f"--nanogpt={tmp_path / 'nano'}",
                "--decode_threads=1", f"--json={out}"])
    printed = capsys.readouterr().out
    r = json.loads(out.read_text())["decode"]["1x2x16:8 1t"]
    assert set(r["rows"]) == {"alibi", "rope", "fox", "nanoGPT"}
    assert set(r["rows"]["rope"]) == {"reference", "static"} and set(r["rows"]["fox"]) == {"reference", "static"}
    assert all(m["same_tokens"] for n in ("alibi", "rope") for m in r["rows"][n].values())
    assert r["rows"]["nanoGPT"]["nanogpt"]["tokens_per_s"] > 0 and "best/nanoGPT" in printed
    assert [b["encoding"] for b in r["breakdown"]] == ["alibi", "rope"] and "other" in printed
    bench.main(["--sections=decode", "--decode_shapes=1x2x16:8", "--gen_tokens=4", "--rounds=1",
                "--decode_encodings=none", "--decode_compile=False", f"--json={out}"])
    assert "nanoGPT: left out (give --nanogpt=" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--nanogpt=/nonexistent"], "no model.py there"),
    (["--decode_shapes=4x4:64"], "is not LxHxC:block"),
    (["--decode_threads=0"], "--decode_threads must be whole numbers > 0"),
    (["--decode_window=-1"], "--decode_window must be >= 0"),
    (["--long_lengths=4k"], "--long_lengths must be whole numbers > 0"),
    (["--sections=gen"], "valid sections are train, eval, decode, long"),
])
def test_bench_decode_bad_input(argv, message, capsys):
    import bench
    from tests.inproc import one_line_error
    assert message in one_line_error(bench.main, ["--sections=decode", *argv], capsys)


@pytest.mark.slow
def test_every_encoding_decodes_compiled_in_one_process():
    """Issue #22: one process generates with compile=True from every registered encoding (more models than
    dynamo's recompile limit of 8 graphs a function), each agreeing with its eager static step."""
    for name in ALL:
        model = tiny_gpt(name, n_layer=1, n_head=2, n_embd=16, window=16)
        prompt = torch.randint(0, 40, (1, 3), generator=torch.Generator().manual_seed(0))
        d = decode.Decoder(model, compile=True)
        got = d.generate(prompt, 20, top_k=1)     # more steps than the limit: a graph per token would fail
        assert d.compiled_steps == 19, name
        assert torch.equal(got, model.generate(prompt, 20, top_k=1)), name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rope", "rnn", "conv", "floater"])
def test_ahead_of_time_step_gives_the_eager_tokens_and_serves_every_model_of_its_shape(name):
    """compile=AheadOfTime (training/aot.py): the exported step's tokens are the eager static step's, with what the
    encodings keep in the cache (RoPE's rows, the RNN's state, the convolution's ring and FLOATER's solved
    rows, written at every step) read and written in the Decoder's own cache; a second model of the same shape
    runs the same package with its own weights (a different text), and a later generation of the first after a
    reset is unchanged."""
    from training import aot
    prompt = torch.randint(0, 40, (1, 5), generator=torch.Generator().manual_seed(0))
    models = [tiny_gpt(name, seed=s, n_layer=1, n_head=2, n_embd=16, window=8) for s in (0, 1)]
    before, seeded = len(aot.RUNNERS), lambda: torch.Generator().manual_seed(0)   # sampled sharp: the texts differ
    eager = [m.generate(prompt, 30, 0.2, generator=seeded()) for m in models]
    d = decode.Decoder(models[0], compile=aot.AheadOfTime)
    got = [d.generate(prompt, 30, 0.2, generator=seeded()),
           models[1].generate(prompt, 30, 0.2, generator=seeded(), compile=aot.AheadOfTime),
           d.generate(prompt, 30, 0.2, generator=seeded())]
    assert len(aot.RUNNERS) == before + 1 and d.step.fallback is None   # one package, no fallback
    assert torch.equal(got[0], eager[0]) and torch.equal(got[1], eager[1]) and torch.equal(got[2], eager[0])
    assert not torch.equal(eager[0], eager[1])
