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

Never builds the (Tq, Tk, D) tensor of r_{i-j}: r is projected once per distance,
(H, n, D) for the n positions in play, and (q + v) @ r.T, (B, H, Tq, n), is gathered at
i - j. This is the paper's "relative shift" done as an index gather, which stays right
with a KV cache (queries at the end of the keys) and with non-contiguous cached keys.
"""
import math

import torch
from torch import nn

from .base import PositionalEncoding
from .sinusoidal import sinusoidal_table


class TransformerXL(PositionalEncoding):
    name = "transformer_xl"
    extrapolates = True        # measured flat to 16x (README, "Train short, test long")

    def __init__(self, n_layer: int, n_head: int, n_embd: int):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.w_r = nn.Parameter(torch.randn(n_layer, n_embd, n_embd) * 0.02)   # (L, C, C): r = R @ W_R
        self.u = nn.Parameter(torch.randn(n_head, n_embd // n_head) * 0.02)   # (H, D) content bias
        self.v = nn.Parameter(torch.randn(n_head, n_embd // n_head) * 0.02)   # (H, D) position bias
        self.register_buffer("table", sinusoidal_table(0, n_embd), persistent=False)   # (n, C) R_0 .. R_{n-1}
        self.n_positions = 0

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_head, cfg.n_embd)

    def set_length(self, n_positions):
        if n_positions > len(self.table):  # grown on the host, once per forward
            n = max(n_positions, 2 * len(self.table))
            self.table = sinusoidal_table(n, self.n_embd).to(self.table.device)
        self.n_positions = n_positions     # distances i - j never reach it

    def attention_logits(self, q, k, q_pos, k_pos, layer):
        B, H, Tq, D = q.shape
        R = self.table[:self.n_positions].to(q.dtype)                              # (n, C)
        r = (R @ self.w_r[layer].to(q.dtype)).view(-1, H, D).transpose(0, 1)       # (H, n, D)
        content = (q + self.u[:, None].to(q.dtype)) @ k.transpose(-1, -2)          # (B, H, Tq, Tk)
        position = (q + self.v[:, None].to(q.dtype)) @ r.transpose(-1, -2)         # (B, H, Tq, n)
        dist = (q_pos[:, None] - k_pos[None, :]).clamp(min=0)                      # (Tq, Tk); future keys masked later
        return (content + position.gather(-1, dist.expand(B, H, -1, -1))) / math.sqrt(D)
