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
cached keys. Where the keys are consecutive positions and the queries the last of them
(training, a prefill, a query block) the shift is a strided view of the product instead (shifted(): no gather, whose
backward scatter cost as much as the product itself on CPU). Either way one GEMM
(baddbmm) forms (q + u).k and adds the position term.
Decoding: without autograd the projected rows are kept per layer and only
the new distances are projected at each step; a call with fewer (query, key) pairs than
distances in play (a windowed decode step) projects only its pairs' rows, so its cost
and memory follow the window, not the position.
Static decoding (decode.py): start_decoding projects the rows of all n distances of the
generation once per layer, into buffers; a step reads (q + v) @ r.T at the distances of its
slots (a gather: the slots of a static cache need not be consecutive positions), with
nothing checked or grown on the host. Memory: n x C floats per layer, half of what a KV cache
of every position holds; under a window (a ring cache) these rows are what grows with n.
"""
import math

import torch
from torch import nn

from .base import PositionalEncoding
from .sinusoidal import sinusoidal_table


def queries_at_the_end(q_pos, k_pos):
    """Keys at consecutive positions, the queries the last of them (training, a prefill, a query
    block; positions increase: GPT.forward)."""
    Tq, Tk = len(q_pos), len(k_pos)
    return Tq <= Tk and int(k_pos[-1] - k_pos[0]) == Tk - 1 and bool((q_pos == k_pos[Tk - Tq:]).all())


class TransformerXL(PositionalEncoding):
    name = "transformer_xl"
    extrapolates = True        # measured flat to 16x (README, "Train short, test long")
    scores_by_query_block = True

    def __init__(self, n_layer: int, n_head: int, n_embd: int):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.w_r = nn.Parameter(torch.randn(n_layer, n_embd, n_embd) * 0.02)   # (L, C, C): r = R @ W_R
        self.u = nn.Parameter(torch.randn(n_head, n_embd // n_head) * 0.02)   # (H, D) content bias
        self.v = nn.Parameter(torch.randn(n_head, n_embd // n_head) * 0.02)   # (H, D) position bias
        self.register_buffer("table", sinusoidal_table(0, n_embd), persistent=False)   # (n, C) R_0 .. R_{n-1}
        self.n_positions = 0
        self.rows = {}   # layer -> (key, r (cap, C) projected so far, how many rows are filled); no autograd
        self.decoding = False   # static decoding: every distance's rows in the buffers r{layer}, (n, C)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_head, cfg.n_embd)

    def set_length(self, n_positions):
        if n_positions > len(self.table):  # grown on the host, once per forward
            n = max(n_positions, 2 * len(self.table))
            self.table = sinusoidal_table(n, self.n_embd).to(self.table.device)
        self.n_positions = n_positions     # distances i - j never reach it

    @torch.no_grad()
    def start_decoding(self, batch, n_positions, device, dtype):
        table = self.table[:n_positions].to(dtype)
        for layer in range(self.w_r.shape[0]):  # buffers: a compiled step takes them as inputs
            self.register_buffer(f"r{layer}", table @ self.w_r[layer].to(dtype), persistent=False)   # (n, C)
        self.decoding = True

    def end_decoding(self):
        self.decoding = False

    def static_position(self, qv, q_pos, k_pos, layer):
        """(B, H, Tq, Tk) position term of a decoding step, from the rows of start_decoding: the
        rows at the pairs' distances when there are fewer pairs than rows (a ring under a window),
        else the product with every row, gathered at the distances."""
        B, H, Tq, D = qv.shape
        r = self.projected(layer, qv.dtype)                                         # (n, C), start_decoding's
        dist = (q_pos[:, None] - k_pos[None, :]).clamp(0, len(r) - 1)              # (Tq, Tk); hidden keys masked later
        if dist.numel() < len(r):
            rd = r.index_select(0, dist.view(-1)).view(*dist.shape, H, D)          # (Tq, Tk, H, D)
            return torch.einsum("bhqd,qkhd->bhqk", qv, rd)
        P = qv @ r.view(-1, H, D).permute(1, 2, 0)                                  # (B, H, Tq, n)
        return P.gather(-1, dist.expand(B, H, -1, -1))

    def train(self, mode=True):
        """Switching modes drops the projected rows: an optimizer that updates W_R in place
        without bumping its version counter (fused AdamW) would otherwise leave them stale."""
        self.rows = {}
        return super().train(mode)

    def projected(self, layer, dtype):
        """r_d = W_R R_d for d < n_positions, (n, C). With autograd, projected whole; without,
        kept per layer, the new rows only projected, and rebuilt when W_R changes (its
        in-place version counter: load_state_dict, an unfused optimizer step; fused AdamW does
        not bump it, so train() and eval() drop the rows too) or moves."""
        n, w = self.n_positions, self.w_r[layer]
        if torch.is_grad_enabled() and self.w_r.requires_grad:
            return self.table[:n].to(dtype) @ w.to(dtype)
        if self.decoding:  # a prefill during static decoding: start_decoding's rows, not a second copy
            return getattr(self, f"r{layer}")[:n].to(dtype)
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

    def shifted(self, qv, layer, Tk):
        """(B, H, Tq, Tk) view whose [i, j] is qv_i . r_{a+i-j} for j <= a + i, for queries at the
        last Tq = Tk - a of Tk consecutive key positions (past the diagonal: other products,
        masked later). P = qv @ [r_{Tk-1}, ..., r_0, 0].T is (B, H, Tq, Tk + 1), P[i, m] =
        qv_i . r_{Tk-1-m}, so [i, j] is P's element (Tk - 1 - a) + i Tk + j: a view with row
        stride Tk, no copy, no gather (the paper's relative shift, done by the strides)."""
        B, H, Tq, D = qv.shape
        r = self.projected(layer, qv.dtype)[:Tk].view(Tk, H, D).transpose(0, 1)    # (H, Tk, D): r_0 .. r_{Tk-1}
        if Tq == 1:  # a decode step: [0, j] = qv . r_{Tk-1-j}, the product flipped (no copy of the rows)
            return (qv @ r.transpose(-1, -2)).flip(-1)                                # (B, H, 1, Tk)
        r = torch.cat([r.flip(1), r.new_zeros(H, 1, D)], dim=1)                    # (H, Tk + 1, D)
        P = (qv @ r.transpose(-1, -2)).contiguous()                                 # (B, H, Tq, Tk + 1)
        return P.as_strided((B, H, Tq, Tk), (H * Tq * (Tk + 1), Tq * (Tk + 1), Tk, 1),
                            P.storage_offset() + Tk - 1 - (Tk - Tq))

    def attention_logits(self, q, k, q_pos, k_pos, layer):
        B, _, Tq, D = q.shape
        Tk = k.shape[2]
        qv = q + self.v[:, None].to(q.dtype)                                        # (B, H, Tq, D)
        H = qv.shape[1]       # the encoding's heads, also when q and k come with one head to broadcast
        k = k.expand(B, H, Tk, D)
        dist = (q_pos[:, None] - k_pos[None, :]).clamp(min=0)                      # (Tq, Tk); future keys masked later
        if self.decoding and Tq == 1:  # a static decode step (a prefill takes the branches below)
            position = self.static_position(qv, q_pos, k_pos, layer)
        elif Tq * Tk < self.n_positions:  # fewer pairs than distances (a windowed step): project the pairs' rows
            R = self.table[dist.reshape(-1)].to(q.dtype)                            # (Tq*Tk, C)
            rd = (R @ self.w_r[layer].to(q.dtype)).view(Tq, Tk, H, D)               # (Tq, Tk, H, D)
            position = torch.einsum("bhqd,qkhd->bhqk", qv, rd)                      # (B, H, Tq, Tk)
        elif queries_at_the_end(q_pos, k_pos):  # training, a prefill, a decode step: the shift as a strided view
            position = self.shifted(qv, layer, Tk)
        else:
            r = self.projected(layer, q.dtype).view(-1, H, D).transpose(0, 1)      # (H, n, D)
            position = (qv @ r.transpose(-1, -2)).gather(-1, dist.expand(B, H, -1, -1))   # (B, H, Tq, n) -> (B, H, Tq, Tk)
        scale, qu = 1.0 / math.sqrt(D), q + self.u[:, None].to(q.dtype)           # (B, H, Tq, D)
        # one GEMM forms (q + u).k and adds the position term to it, both scaled: no separate sum
        scores = torch.baddbmm(position.reshape(B * H, Tq, Tk), qu.reshape(B * H, Tq, D),
                               k.reshape(B * H, Tk, D).transpose(1, 2), beta=scale, alpha=scale)
        return scores.view(B, H, Tq, Tk)
