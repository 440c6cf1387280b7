"""Decoding from a model.GPT, beside model.py as gpt-fast's generate.py: sampling, the static step
(plain, compiled by torch.compile, ahead of time: training/aot.py, or captured in a CUDA graph: CUDAGraphStep)
and the Decoder that runs them.

The static step (gpt-fast's design): one KVCache for the generation, the step's position a (1,) device
tensor advanced in place, the encodings' state in the cache, the step GPT.run itself, compiled whole
with compile=True (one graph for every step). GPT.forward with the growing cache serves static=False
and length_dependent encodings (dynamic NTK); `learned` re-encodes the last max_positions tokens past
its table.
"""
import functools
import time
import warnings

import torch
from torch.nn import functional as F

from attention.flex import own_code


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """(B, vocab) logits -> (B, 1) sampled ids (nanoGPT's rule: temperature, top_k, softmax, multinomial)."""
    logits = logits / max(temperature, 1e-8)
    if top_k is not None and top_k < logits.size(-1):
        logits = logits.masked_fill(logits < torch.topk(logits, top_k).values[:, [-1]], -float("inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)


def decode_step(model, idx, pos, cache, n_slots):
    """Logits (B, vocab) of idx's last token at pos (T,) over a static cache's first n_slots slots (symbolic
    when compiled)."""
    return model.run(idx, pos, cache.n_positions, cache, None, n_slots)[:, -1]   # no documents


@functools.lru_cache(maxsize=None)
def compiled_step(config, dynamic):
    """decode_step compiled whole, its own code per model config (own_code), its wrapper in C++ without stride
    asserts: 1.19x tokens/s (benchmarks/decode_options.py, docs/speed.md)."""
    return torch.compile(own_code(decode_step), fullgraph=True, dynamic=dynamic,
                         options={"cpp_wrapper": True, "size_asserts": False})


class CUDAGraphStep:
    """A drop-in for decode_step (model, idx, pos, cache, n_slots) -> logits, one instance per generation
    (Decoder(model, compile=CUDAGraphStep)): the static step over all of the cache's slots (one shape), run eagerly
    for the first `warmup` tokens (on a side stream, as CUDA graphs ask), then captured in a torch.cuda.CUDAGraph
    and replayed for every later token: one launch a token instead of one a kernel.

    An explicit CUDAGraph rather than torch.compile(mode="reduce-overhead"): the step already reads and writes only
    static buffers (the cache's keys, values, slot positions and what encodings keep, the Decoder's (1,) position
    advanced in place), so capture needs just one static buffer more, the input token `tok`; nothing is compiled
    (reduce-overhead pays inductor's compilation per configuration and dynamo's guards on every call), and the
    captured function `run` is a plain function of those buffers, so on a CPU (capture=False, or any CPU tensor)
    the very same function runs uncaptured and can be checked against the static step. Autocast's weight cache is
    off while capturing (PyTorch's CUDA-graph notes). A step that cannot be captured (a host read) runs eager for
    the rest of the generation, with one warning."""

    def __init__(self, capture=None, warmup=2):
        self.capture = capture   # None: capture where the tokens are on CUDA
        self.warmup, self.steps = warmup, 0
        self.graph, self.tok, self.logits, self.failed = None, None, None, False

    def run(self, model, pos, cache):
        """The captured function: logits (B, vocab) from the static buffers tok, pos and cache."""
        return decode_step(model, self.tok, pos, cache, cache.size)

    def __call__(self, model, idx, pos, cache, n_slots):
        if self.tok is None:
            self.tok = torch.empty_like(idx)
        self.tok.copy_(idx)
        if self.graph is not None:
            self.graph.replay()
            return self.logits.clone()   # the graph's output buffer is overwritten by the next replay
        capture = idx.is_cuda if self.capture is None else self.capture
        if not capture or self.failed:
            return self.run(model, pos, cache)
        self.steps += 1
        if self.steps <= self.warmup:   # real steps, on a side stream
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                logits = self.run(model, pos, cache)
            torch.cuda.current_stream().wait_stream(side)
            return logits
        return self.capture_and_replay(model, pos, cache)

    def capture_and_replay(self, model, pos, cache):
        device = pos.device.type
        graph = torch.cuda.CUDAGraph()
        try:   # capture records the step without running it: the replay below runs this token's step
            with torch.autocast(device, torch.get_autocast_dtype(device), torch.is_autocast_enabled(device),
                                cache_enabled=False), torch.cuda.graph(graph):
                self.logits = self.run(model, pos, cache)
        except RuntimeError as e:
            warnings.warn(f"the decode step could not be captured in a CUDA graph ({str(e)[:200]}); decoding eager")
            self.failed = True
            return self.run(model, pos, cache)
        self.graph = graph
        graph.replay()
        return self.logits.clone()


class Decoder:
    """Generates from `model`: its static step where allowed (compile=True: by torch.compile; a class: its instance
    per generation, one shape, e.g. training/aot.py's AheadOfTime or CUDAGraphStep), else the reference step.
    A batch (B, T) of B prompts decodes B streams together; the prompts have one length, since one (T,) tensor
    of positions serves every row (left-padded prompts of several lengths would need positions per row)."""

    def __init__(self, model, static=True, compile=False):
        self.model = model
        self.static = static and model.static_decoding
        self.compile = compile if self.static else False   # True, a class, or False
        self.step, self.cache = decode_step, None
        self.compiled_steps, self.first_step_s = 0, 0.0   # steps through the compiled graph; the first's seconds
        self.length = 0   # positions written so far (host side)

    def open(self, batch, n_positions, device):
        m = self.model
        if not self.static:
            m.setup_cache(batch, n_positions)
            return
        c = self.cache
        if c is not None and (c.n_positions, c.slot_pos.device, c.k0.shape[0]) == (n_positions, device, batch):
            c.reset()  # the same shapes again: keep the buffers, and the graph compiled for them
        else:
            self.cache = m.new_cache(batch, n_positions)
        m.kv_cache = self.cache
        if self.compile:
            if callable(self.compile):
                self.step = self.compile()
            else:
                self.step = compiled_step(repr(m.config), not self.cache.period)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)            # the next token's position
        self.positions = torch.arange(n_positions, device=device)
        self.length = 0

    @torch.inference_mode()
    def prefill(self, idx):
        """Logits (B, vocab) after the prompt idx (B, T)."""
        if not self.static:
            return self.model(idx)[0][:, -1]
        T = idx.shape[1]
        chunk = self.cache.chunk if self.cache.period else T
        for s in range(0, T, chunk):
            e = min(s + chunk, T)
            logits = decode_step(self.model, idx[:, s:e], self.positions[s:e], self.cache, min(e, self.cache.size))
        self.pos.fill_(T)
        self.length = T
        return logits

    @torch.inference_mode()
    def next(self, tok):
        """Logits (B, vocab) after one more token tok (B, 1)."""
        if not self.static:
            return self.model(tok)[0][:, -1]
        cache = self.cache
        # the slots written so far; a compiled step under a ring, or ahead of time: all of them, one shape
        whole = self.compile and (cache.period or callable(self.compile))
        n = cache.size if whole else min(self.length + 1, cache.size)
        t = time.perf_counter()
        logits = self.step(self.model, tok, self.pos, cache, n)
        if self.compile and not self.compiled_steps:  # the first compiled step compiles: timed, once
            self.first_step_s = time.perf_counter() - t
        self.compiled_steps += bool(self.compile)
        self.pos += 1
        self.length += 1
        return logits

    def close(self):
        """The model's cache and what the encodings kept in it for this generation are dropped."""
        self.model.clear_cache()
        if self.cache is not None:
            self.cache.drop_states()

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, on_token=None):
        """Continue idx (B, T) by max_new_tokens -> (B, T + max_new_tokens)."""
        m = self.model
        B, T = idx.shape
        limit, total = m.max_positions, T + max_new_tokens
        fits = total if limit is None else min(total, limit)   # positions the cache can cover
        out = torch.empty(B, total, dtype=idx.dtype, device=idx.device)
        out[:, :T] = idx
        self.open(B, fits, idx.device)
        try:
            cached = min(T, fits)
            logits = self.prefill(idx[:, -fits:])
            for t in range(T, total):
                nxt = sample_next(logits, temperature, top_k, generator)     # (B, 1)
                out[:, t:t + 1] = nxt
                if on_token is not None:
                    on_token(nxt[0, 0].item())
                if t == total - 1:
                    break
                if cached < fits:
                    logits, cached = self.next(nxt), cached + 1
                else:  # the text outgrew the encoding's positions: re-encode the last `limit` tokens
                    self.close()
                    logits = m(out[:, t + 1 - limit:t + 1])[0][:, -1]
        finally:
            self.close()
        return out
