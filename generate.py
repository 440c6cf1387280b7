"""Decoding from a model.GPT, beside model.py as gpt-fast's generate.py: sampling, the static step
(plain, compiled by torch.compile, or ahead of time: training/aot.py) and the Decoder that runs them.

The static step (gpt-fast's design): one KVCache for the generation, the step's position a (1,) device
tensor advanced in place, the encodings' state in the cache, the step GPT.run itself, compiled whole
with compile=True (one graph for every step). GPT.forward with the growing cache serves static=False
and length_dependent encodings (dynamic NTK); `learned` re-encodes the last max_positions tokens past
its table.
"""
import functools
import time

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


class Decoder:
    """Generates from `model`: its static step where allowed (compile=True: by torch.compile; a class: its instance
    per generation, one shape, e.g. training/aot.py's AheadOfTime), else the reference step."""

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
