"""Batched decoding (issue #52): B streams decoded together. For every registered encoding, greedy decoding of
three different prompts (equal lengths: one (T,) tensor of positions serves every row) as one batch draws each
prompt's tokens decoded alone, and the batch's cached logits at every step are the full forward's (no cache) over
each row's whole text, in the compute dtype (float32; bfloat16 under autocast, to within one bfloat16 step). The
CUDA-graph step's captured function, run uncaptured on the CPU, draws the static step's tokens; sample.py's --batch
and --decode=graph."""
import functools

import pytest
import torch

import generate as decode
import positional
from tests.conftest import tiny_gpt

ALL = list(positional.REGISTRY)
B, PROMPT, NEW = 3, 6, 10


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("kw", [dict(), dict(window=5, sinks=2)], ids=["full", "window"])
def test_a_batch_of_prompts_decodes_as_each_prompt_alone(name, kw):
    model = tiny_gpt(name, **kw)
    prompts = torch.randint(0, 40, (B, PROMPT), generator=torch.Generator().manual_seed(1))
    d = decode.Decoder(model)
    together = d.generate(prompts, NEW, top_k=1)                         # (B, PROMPT + NEW), greedy
    alone = torch.cat([d.generate(prompts[b:b + 1], NEW, top_k=1) for b in range(B)])
    assert torch.equal(together, alone)
    d.open(B, PROMPT + NEW, prompts.device)
    steps = [d.prefill(together[:, :PROMPT])]
    steps += [d.next(together[:, t:t + 1]) for t in range(PROMPT, PROMPT + NEW - 1)]
    d.close()
    with torch.no_grad():
        full = model(together[:, :-1])[0][:, PROMPT - 1:]                # (B, NEW, vocab)
    got = torch.stack(steps, 1)
    assert got.dtype == full.dtype == torch.float32
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.argmax(-1), together[:, PROMPT:])              # greedy: each token is its step's argmax
    assert not torch.allclose(got[0], got[1]) and not torch.allclose(got[1], got[2])   # three streams, not one



@pytest.mark.parametrize("name", ALL)
def test_a_batchs_cached_logits_in_bfloat16_are_the_full_forwards(name):
    """Under CPU autocast (bfloat16, the cache kept in it): the batch's cached logits at every step are the full
    forward's within one bfloat16 step of the logits' scale (2^-8), both in bfloat16."""
    model = tiny_gpt(name)
    idx = torch.randint(0, 40, (B, PROMPT + NEW), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", torch.bfloat16), torch.no_grad():
        full = model(idx[:, :-1])[0][:, PROMPT - 1:]
        d = decode.Decoder(model)
        d.open(B, PROMPT + NEW, idx.device)
        steps = [d.prefill(idx[:, :PROMPT])] + [d.next(idx[:, t:t + 1]) for t in range(PROMPT, PROMPT + NEW - 1)]
        d.close()
    got = torch.stack(steps, 1)
    assert got.dtype == full.dtype == torch.bfloat16 and d.cache.k0.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), full.float(), rtol=2 ** -8, atol=2 ** -8)

STATIC = [n for n in ALL if tiny_gpt(n).static_decoding]


@pytest.mark.parametrize("name", STATIC)
@pytest.mark.parametrize("new", [NEW, 26], ids=["slot per position", "ring"])
def test_the_cuda_graph_step_uncaptured_draws_the_static_steps_tokens(name, new):
    """CUDAGraphStep's captured function, a function of its static buffers (the token buffer, the Decoder's
    position, the cache), run eagerly on the CPU over all of the cache's slots: the static step's tokens, batched,
    with the token buffer reused (one tensor for the generation) and every step through it."""
    model = tiny_gpt(name, window=5, sinks=2)
    prompts = torch.randint(0, 40, (B, PROMPT), generator=torch.Generator().manual_seed(2))
    d = decode.Decoder(model, compile=functools.partial(decode.CUDAGraphStep, capture=False))
    buffers = []
    got = d.generate(prompts, new, 0.9, 20, torch.Generator().manual_seed(4),
                     on_token=lambda _: buffers.append(d.step.tok))
    want = decode.Decoder(model).generate(prompts, new, 0.9, 20, torch.Generator().manual_seed(4))
    assert torch.equal(got, want)
    assert d.compiled_steps == new - 1 and d.step.graph is None          # no capture on a CPU
    assert bool(d.cache.period) == (new > NEW)                            # the ring: fewer slots than positions
    assert len({id(b) for b in buffers[1:]}) == 1 and torch.equal(buffers[-1], got[:, -2:-1])


def test_the_cuda_graph_step_on_cpu_tensors_runs_uncaptured():
    """capture=None: only CUDA tensors are captured; CPU ones take the same function eagerly."""
    model = tiny_gpt("rope")
    prompt = torch.randint(0, 40, (1, 4))
    d = decode.Decoder(model, compile=decode.CUDAGraphStep)
    assert torch.equal(d.generate(prompt, 8, top_k=1), model.generate(prompt, 8, top_k=1))
    assert d.step.graph is None and d.step.steps == 0


def sampled(out_dir, capsys, *extra):
    import sample
    capsys.readouterr()
    sample.main([f"--out_dir={out_dir}", "--start=All:", "--max_new_tokens=12", "--device=cpu", *extra])
    return capsys.readouterr()


def test_sample_decodes_its_samples_together_with_batch(tiny_run, capsys):
    """--batch=True: the num_samples streams as one batch; greedy, each is the sample decoded alone and streamed;
    sampled, the streams are drawn independently (different texts)."""
    alone = sampled(tiny_run, capsys, "--num_samples=3", "--top_k=1")
    together = sampled(tiny_run, capsys, "--num_samples=3", "--top_k=1", "--batch=True")
    assert together.out == alone.out and alone.out.count("---------------") == 3
    assert "3 streams as one batch" in together.err.splitlines()[-1]
    texts = sampled(tiny_run, capsys, "--num_samples=3", "--temperature=2.0", "--batch=True").out
    texts = [t.strip() for t in texts.split("---------------") if t.strip()]
    assert len(texts) == 3 and len(set(texts)) > 1 and all(t.startswith("All:") for t in texts)


@pytest.mark.parametrize("argv, message", [
    (["--decode=graph"], "error: --decode=graph needs CUDA (the device is cpu); use --decode=static"),
    (["--decode=graph", "--compile=True"], "error: --decode=graph captures the eager static step; drop --compile"),
    (["--decode=cudagraph"], "error: --decode must be static or graph"),
])
def test_sample_refuses_a_graph_it_cannot_capture(argv, message, tiny_run, capsys):
    from tests.inproc import sample_error
    assert sample_error([f"--out_dir={tiny_run}", "--device=cpu", *argv], capsys).startswith(message)


def test_a_batch_outgrowing_learned_positions_is_re_encoded_row_by_row():
    """Past its 8 positions `learned` re-encodes the last 8 tokens of every row: batched, each row's tokens alone."""
    model = tiny_gpt("learned", block_size=8)
    prompts = torch.randint(0, 40, (B, 4), generator=torch.Generator().manual_seed(3))
    together = model.generate(prompts, 12, top_k=1)
    assert torch.equal(together, torch.cat([model.generate(prompts[b:b + 1], 12, top_k=1) for b in range(B)]))
