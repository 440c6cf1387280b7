"""Generation: the static decode step (gpt-fast's design) and the reference step it must match.

A decode step of a small model is microseconds of arithmetic; what a user waits for is the
host work around it. The static step removes it:

  - one StaticKVCache (cache.py) of fixed shape for the whole generation, its slots addressed
    by a positions tensor: no growing views, no host-side length per token;
  - the positions of the step are a (1,) tensor on the device, advanced in place (pos += 1);
  - set_length (the encodings' tables) and start_decoding (what an encoding's step keeps, in
    tensors of fixed shape: Transformer-XL's projected rows, FoX's running sums) run once,
    for the generation's positions (GPT.start_decoding);
  - the step itself is GPT.run, the tensor part of GPT.forward: the mask row and the score
    bias row are computed on the device from the query position and the slots' positions;
  - with compile=True that step is torch.compile'd once (fullgraph), and every token runs the
    compiled graph (Decoder.compiled_steps counts them). Its shapes: under a ring cache, all
    static (the ring's slots, all attended); with one slot per position, the number of
    attended slots is dynamic (one graph, symbolic in it), so a step attends over the slots
    written so far, as the eager step does, not over the whole cache from the first token
    (measured: benchmarks/cpu-2core-quiet.md, section 9).

Sampling (sample_next) is the same function for every path, so for a fixed seed the static,
compiled and reference paths draw the same tokens (their logits differ by float rounding:
the static cache attends over its slots in slot order, with empty slots masked).

Which path runs is read from capabilities, never from names: GPT.static_decoding (no linear
attention, and every encoding's static_decoding: no table grown per token, no state kept
in Python between calls). Otherwise, and with static=False, the reference path runs: GPT.forward
with the growing KVCache, one token at a time. An encoding with a position table
(max_positions, `learned`) uses the cache while the text fits and then re-encodes the last
max_positions tokens at every step, on both paths.
"""
import time

import torch
from torch.nn import functional as F

# Intra-op threads for a batch-1 decode step on a CPU (sample.py's default). Measured on the
# 2-core machine (benchmarks/cpu-2core-quiet.md, 2000 tokens, recipe shape): quiet, two threads
# give the eager static step (sample.py's default path) nothing (alibi 1498 vs 1515 tokens/s)
# and the compiled step 30% (1984 vs 2586); with another process on a core, two threads are
# many times slower (issue #14: 124 s against 6-7 s; benchmarks/decode-cpu-2core-busy.md).
# One thread costs little on a quiet machine and avoids the stall on a busy one; --threads=2
# pays when the cores are free and the step is compiled.
DECODE_THREADS = 1
PREFILL_CHUNK = 16   # prompt tokens per call into a ring cache (cache.static_cache's chunk)


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """(B, vocab) logits of the last position -> (B, 1) sampled token ids (nanoGPT's rule:
    divide by the temperature, keep the top_k, softmax, multinomial)."""
    logits = logits / max(temperature, 1e-8)
    if top_k is not None and top_k < logits.size(-1):
        v, _ = torch.topk(logits, top_k)
        logits = logits.masked_fill(logits < v[:, [-1]], -float("inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)


def decode_step(model, idx, pos, cache, n_slots):
    """Logits (B, vocab) of the last token of idx (B, T) at positions pos (T,) with a static
    cache, attending to its first n_slots slots (an argument, so a compiled step can take it
    as a symbolic size)."""
    cache.filled = n_slots
    return model.run(idx, pos, cache)[:, -1]


def compiled_step(dynamic):
    """decode_step compiled whole; dynamo keeps the graphs on the function's code, so a new
    Decoder (every generate) reuses those compiled for the same shapes."""
    return torch.compile(decode_step, fullgraph=True, dynamic=dynamic)


class Decoder:
    """Generates from `model`. static: the static step where the model allows it (else the
    reference step); compile: that static step compiled (torch.compile, once per shape)."""

    def __init__(self, model, static=True, compile=False):
        self.model = model
        self.static = static and model.static_decoding
        self.compile = compile and self.static
        self.step = decode_step       # compiled at open(), once the cache says which shapes are static
        self.compiled_steps = 0      # decode steps that ran through the compiled graph
        self.first_step_s = 0.0      # seconds of the first compiled step: the compilation, mostly
        self.cache = None

    # ---- the two paths, behind one interface: open(B, n), prefill(idx), next(tok), close() ----
    def open(self, batch, n_positions, device):
        m = self.model
        if not self.static:
            m.setup_cache(batch, n_positions)
            return
        m.start_decoding(batch, n_positions)                                  # tables and state, once
        c = self.cache
        if c is not None and (c.max_len, c.slot_pos.device, getattr(c, "k0").shape[0]) == (n_positions, device, batch):
            c.reset()  # the same shapes again: keep the buffers, and the graph compiled for them
        else:
            self.cache = m.static_cache(batch, n_positions)
        m.kv_cache = self.cache
        if self.compile:
            self.step = compiled_step(dynamic=not self.cache.period)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)            # the next token's position
        self.positions = torch.arange(n_positions, device=device)

    @torch.no_grad()
    def prefill(self, idx):
        """Logits (B, vocab) after the prompt idx (B, T)."""
        if not self.static:
            return self.model(idx)[0][:, -1]
        T = idx.shape[1]
        chunk = PREFILL_CHUNK if self.cache.period else T
        for s in range(0, T, chunk):
            e = min(s + chunk, T)
            logits = decode_step(self.model, idx[:, s:e], self.positions[s:e], self.cache, min(e, self.cache.size))
        self.pos.fill_(T)
        return logits

    @torch.no_grad()
    def next(self, tok):
        """Logits (B, vocab) after one more token tok (B, 1)."""
        if not self.static:
            return self.model(tok)[0][:, -1]
        cache = self.cache
        # the slots written so far (see StaticKVCache); a compiled step under a ring: all of them, one shape
        n = cache.size if self.compile and cache.period else min(cache.filled + 1, cache.size)
        if self.compile and not self.compiled_steps:  # the first compiled step compiles: timed, once
            t = time.perf_counter()
            logits = self.step(self.model, tok, self.pos, cache, n)
            self.first_step_s = time.perf_counter() - t
        else:
            logits = self.step(self.model, tok, self.pos, cache, n)
        self.compiled_steps += self.compile
        self.pos += 1
        return logits

    def close(self):
        """The model's cache is cleared; this decoder keeps its static cache for the next generate."""
        self.model.clear_cache()
        if self.static:
            self.model.end_decoding()

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, on_token=None):
        """Continue idx (B, T) by max_new_tokens -> (B, T + max_new_tokens). on_token(id) is
        called with each new token of the first sequence, for streaming. The cache is dropped
        on the way out, an exception included."""
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
