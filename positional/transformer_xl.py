"""Transformer-XL relative positional encoding (Dai et al. 2019, "Transformer-XL: Attentive
Language Models Beyond a Fixed-Length Context", https://arxiv.org/abs/1901.02860, sec. 3.3).

The absolute embedding is replaced, inside every attention, by a fixed sinusoidal
encoding R_{i-j} of the distance, projected per layer by a learned W_R, and two learned
global vectors u and v take the place of the query in the position-only terms:

    score(i, j) = [ q_i.k_j  +  q_i.W_R R_{i-j}  +  u.k_j  +  v.W_R R_{i-j} ] / sqrt(D)
                = [ (q_i + u).k_j  +  (q_i + v).r_{i-j} ] / sqrt(D),   r_d = W_R R_d (per head)

R_d is the sinusoidal table of positions.sinusoidal (sin/cos interleaved; the paper
concatenates them, which is the same up to a permutation of W_R's input columns).
As in the paper's code (untied biases off by default), W_R is per layer while u and v,
each (H, D), are shared by all layers.

Never builds the (Tq, Tk, D) tensor of r_{i-j} for a full pass: r is projected once per
distance, (H, n, D) for the n positions in play, and (q + v) @ r.T, (B, H, Tq, n), is
gathered at i - j. This is the paper's "relative shift" done as an index gather, which
stays right with a KV cache (queries at the end of the keys) and with non-contiguous
cached keys. Decoding: without autograd the projected rows are kept per layer and only
the new distances are projected at each step; a call with fewer (query, key) pairs than
distances in play (a windowed decode step) projects only its pairs' rows, so its cost
and memory follow the window, not the position.
"""
import math

import torch
from torch import nn

from .base import PositionalEncoding
from .sinusoidal import sinusoidal_table


class TransformerXL(PositionalEncoding):
    name = "transformer_xl"
    extrapolates = True        # measured flat to 16x (README, "Train short, test long")
    static_decoding = False    # projected rows kept per layer in Python, grown as positions arrive

    def __init__(self, n_layer: int, n_head: int, n_embd: int):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.w_r = nn.Parameter(torch.randn(n_layer, n_embd, n_embd) * 0.02)   # (L, C, C): r = R @ W_R
        self.u = nn.Parameter(torch.randn(n_head, n_embd // n_head) * 0.02)   # (H, D) content bias
        self.v = nn.Parameter(torch.randn(n_head, n_embd // n_head) * 0.02)   # (H, D) position bias
        self.register_buffer("table", sinusoidal_table(0, n_embd), persistent=False)   # (n, C) R_0 .. R_{n-1}
        self.n_positions = 0
        self.rows = {}   # layer -> (key, r (cap, C) projected so far, how many rows are filled); no autograd

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_head, cfg.n_embd)

    def set_length(self, n_positions):
        if n_positions > len(self.table):  # grown on the host, once per forward
            n = max(n_positions, 2 * len(self.table))
            self.table = sinusoidal_table(n, self.n_embd).to(self.table.device)
        self.n_positions = n_positions     # distances i - j never reach it

    def projected(self, layer, dtype):
        """r_d = W_R R_d for d < n_positions, (n, C). With autograd, projected whole; without,
        kept per layer, the new rows only projected, and rebuilt when W_R changes (its
        in-place version counter: an optimizer step, load_state_dict) or moves."""
        n, w = self.n_positions, self.w_r[layer]
        if torch.is_grad_enabled() and self.w_r.requires_grad:
            return self.table[:n].to(dtype) @ w.to(dtype)
        key = (self.w_r._version, dtype, self.table.device, len(self.table))
        old_key, r, filled = self.rows.get(layer, (None, None, 0))
        if old_key != key:  # the table grew (geometrically): keep the rows already projected
            fresh = torch.empty(len(self.table), self.n_embd, dtype=dtype, device=self.table.device)
            if old_key is not None and old_key[:3] == key[:3]:
                fresh[:filled] = r[:filled]
            else:
                filled = 0
            r = fresh
        if filled < n:
            r[filled:n] = self.table[filled:n].to(dtype) @ w.to(dtype)              # (n - filled, C)
            filled = n
        self.rows[layer] = (key, r, filled)
        return r[:n]

    def attention_logits(self, q, k, q_pos, k_pos, layer):
        B, H, Tq, D = q.shape
        Tk = k.shape[2]
        content = (q + self.u[:, None].to(q.dtype)) @ k.transpose(-1, -2)          # (B, H, Tq, Tk)
        qv = q + self.v[:, None].to(q.dtype)                                        # (B, H, Tq, D)
        dist = (q_pos[:, None] - k_pos[None, :]).clamp(min=0)                      # (Tq, Tk); future keys masked later
        if Tq * Tk < self.n_positions:  # fewer pairs than distances (a windowed step): project the pairs' rows
            R = self.table[dist.reshape(-1)].to(q.dtype)                            # (Tq*Tk, C)
            rd = (R @ self.w_r[layer].to(q.dtype)).view(Tq, Tk, H, D)               # (Tq, Tk, H, D)
            position = torch.einsum("bhqd,qkhd->bhqk", qv, rd)                      # (B, H, Tq, Tk)
        else:
            r = self.projected(layer, q.dtype).view(-1, H, D).transpose(0, 1)      # (H, n, D)
            position = (qv @ r.transpose(-1, -2)).gather(-1, dist.expand(B, H, -1, -1))   # (B, H, Tq, n) -> (B, H, Tq, Tk)
        return (content + position) / math.sqrt(D)
