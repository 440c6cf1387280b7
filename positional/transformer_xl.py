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

r is projected once per distance ((n, C), n the positions in play; kept in the cache when
decoding) and (q + v) . r read at i - j: the paper's "relative shift" as a strided view where the
queries are the last of consecutive keys (shifted()), else as a gather (KV cache, rings).
"""
import math

import torch
from torch import nn

from .base import OwnLogits, distance, join
from .sinusoidal import sinusoidal_table


def queries_at_the_end(q_pos, k_pos):
    """Keys at consecutive positions, the queries the last of them (training, a prefill, a query block)."""
    Tq, Tk = len(q_pos), len(k_pos)
    return Tq <= Tk and int(k_pos[-1] - k_pos[0]) == Tk - 1 and bool((q_pos == k_pos[Tk - Tq:]).all())


class TransformerXL(OwnLogits):
    name = "transformer_xl"

    def __init__(self, n_layer: int, n_head: int, n_embd: int):
        super().__init__()
        self.n_head, self.n_embd = n_head, n_embd
        self.w_r = nn.Parameter(torch.randn(n_layer, n_embd, n_embd) * 0.02)   # (L, C, C): r = R @ W_R
        self.u = nn.Parameter(torch.randn(n_head, n_embd // n_head) * 0.02)   # (H, D) content bias
        self.v = nn.Parameter(torch.randn(n_head, n_embd // n_head) * 0.02)   # (H, D) position bias

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_head, cfg.n_embd)

    def table(self, a, b):
        """(b - a, C) R_a .. R_{b-1}."""
        return sinusoidal_table(0, self.n_embd, positions=torch.arange(a, b, device=self.u.device))

    def rows(self, layer, dtype, ctx):
        """r_d = W_R R_d for d < n_positions (distances i - j never reach it), (n, C): projected once per
        forward and layer (ctx.once), or kept in the cache for a generation, where only new rows are projected."""
        if ctx.cache is not None:
            return ctx.kept(self, layer, lambda a, b: self.table(a, b).to(dtype) @ self.w_r[layer].to(dtype))
        return ctx.once((id(self), layer), lambda: self.table_rows(layer, dtype, ctx))

    def table_rows(self, layer, dtype, ctx):
        """(n, C) r_d for the forward's n_positions, the sinusoidal table made once for every layer."""
        table = ctx.once((id(self), "table"), lambda: self.table(0, ctx.n_positions).to(dtype))
        return table @ self.w_r[layer].to(dtype)

    def reversed_rows(self, layer, dtype, ctx):
        """(H, n + 1, D): r_{n-1}, .., r_0 and a zero row, per head, made once per forward and layer: the rows a
        block of Tk keys reads, [r_{Tk-1}, .., r_0, 0], are its last Tk + 1, a view (no copy of r per block)."""
        def make():
            r = self.table_rows(layer, dtype, ctx)                                  # (n, C)
            rev = torch.cat([r.flip(0), r.new_zeros(1, r.shape[1])])                  # (n + 1, C)
            return rev.view(len(rev), self.n_head, -1).transpose(0, 1).contiguous()
        return ctx.once((id(self), "reversed", layer), make)

    def shifted(self, qv, rev, Tk):
        """(B, H, Tq, Tk) view whose [i, j] is qv_i . r_{a+i-j} for j <= a + i, for queries at the
        last Tq = Tk - a of Tk consecutive key positions (past the diagonal: other products,
        masked later). P = qv @ [r_{Tk-1}, ..., r_0, 0].T is (B, H, Tq, Tk + 1), P[i, m] =
        qv_i . r_{Tk-1-m}, so [i, j] is P's element (Tk - 1 - a) + i Tk + j: a view with row
        stride Tk, no copy, no gather (the paper's relative shift, done by the strides)."""
        B, H, Tq, D = qv.shape
        P = (qv @ rev[:, rev.shape[1] - Tk - 1:].transpose(-1, -2)).contiguous()   # (B, H, Tq, Tk + 1)
        return P.as_strided((B, H, Tq, Tk), (H * Tq * (Tk + 1), Tq * (Tk + 1), Tk, 1),
                            P.storage_offset() + Tk - 1 - (Tk - Tq))

    def attend(self, q, k, v, ctx, layer):
        """Without gradients, a cache, a window, documents or groups, for queries the last of consecutive keys (an
        evaluation's query block): SDPA's fused CPU kernel takes the position term as its mask, over the keys before
        the block the relative shift's strided view itself, over the block's own keys a causal square of it, and
        the two softmaxes are joined by their log-sum-exps: no (Tq, Tk) scores, mask or softmax are written."""
        if (torch.is_grad_enabled() or ctx.cache is not None or ctx.window or ctx.doc is not None
                or ctx.groups is not None or q.device.type != "cpu" or k.shape[1] != q.shape[1]
                or not queries_at_the_end(ctx.q_pos, ctx.k_pos)):
            return super().attend(q, k, v, ctx, layer)
        Tq, D, Tk = q.shape[2], q.shape[3], k.shape[2]
        a, scale = Tk - Tq, 1.0 / math.sqrt(D)
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu   # (out, log-sum-exp)
        position = self.shifted((q + self.v[:, None].to(q.dtype)) * scale, self.reversed_rows(layer, q.dtype, ctx), Tk)
        qu = q + self.u[:, None].to(q.dtype)                                      # (B, H, Tq, D)
        future = torch.ones(Tq, Tq, dtype=torch.bool, device=q.device).triu(1)
        square = position[..., a:].masked_fill(future, float("-inf"))            # (B, H, Tq, Tq)
        y, lse = flash(qu, k[:, :, a:], v[:, :, a:], attn_mask=square, scale=scale)
        if a:
            y = join(y, lse, *flash(qu, k[:, :, :a], v[:, :, :a], attn_mask=position[..., :a], scale=scale))[0]
        return y.to(v.dtype)

    @property
    def flex_formed(self):
        return self.n_embd % 2 == 0   # the sinusoid's sin and cos pairs

    def flex_form(self, q, k, v, ctx, layer):
        """(q + u) . k_j + (q + v) . r_{i-j}, over sqrt(D), with no bias: (q_i + v) . r_d = g_i . R_d, g_i =
        W_R^h (q_i + v) (C,) for head h's columns W_R^h, and R_{i-j} by sin(a - b) = sin a cos b - cos a sin b,
        cos(a - b) = cos a cos b + sin a sin b is i's angles against j's: g_i . R_{i-j} = a_i . cos(j w) +
        b_i . sin(j w), C more channels of queries and keys (the sinusoids in float64, as R is made)."""
        B, H, T, D = q.shape
        C = self.n_embd
        g = torch.einsum("bhte,che->bhtc", q + self.v[:, None].to(q.dtype), self.w_r[layer].to(q.dtype).view(C, H, D))
        at_q = sinusoidal_table(0, C, positions=ctx.q_pos).to(q.dtype)                 # (Tq, C): sin, cos of i w
        at_k = sinusoidal_table(0, C, positions=ctx.k_pos).to(k.dtype)                 # (Tk, C)
        sin_i, cos_i = at_q[:, 0::2], at_q[:, 1::2]
        g_sin, g_cos = g[..., 0::2], g[..., 1::2]                                      # g's of sin(d w), cos(d w)
        a, b = g_sin * sin_i + g_cos * cos_i, g_cos * sin_i - g_sin * cos_i                # (B, H, Tq, C/2) each
        qa = torch.cat([q + self.u[:, None].to(q.dtype), a, b], -1) * (1.0 / math.sqrt(D))
        Tk = k.shape[2]
        ka = torch.cat([k, at_k[:, 1::2].expand(B, H, Tk, -1), at_k[:, 0::2].expand(B, H, Tk, -1)], -1)
        return qa, ka, v, None

    def one_query(self, q, k, v, ctx, layer):
        """(q + u) . k_j / sqrt(D) with the position term (q + v) . r_{i-j} / sqrt(D) as a bias over the keys."""
        H, D, scale = self.n_head, q.shape[-1], 1.0 / math.sqrt(q.shape[-1])
        r = self.rows(layer, q.dtype, ctx)                                          # (n, C)
        dist = ctx.once((id(self), "d", ctx.rows.start),
                        lambda: distance(ctx.q_pos, ctx.k_pos)[0].clamp(0, len(r) - 1))   # (Tk,); hidden keys masked
        rd = r.index_select(0, dist).view(-1, H, D).permute(1, 2, 0)                # (H, D, Tk)
        qv, qu = ((q + w[:, None].to(q.dtype)) * scale for w in (self.v, self.u))
        return qu, k, v, qv @ rd                                                    # bias (B, H, 1, Tk)

    def logits(self, q, k, ctx, layer):
        B, _, Tq, D = q.shape
        Tk = k.shape[2]
        qv = q + self.v[:, None].to(q.dtype)                                        # (B, H, Tq, D)
        H = qv.shape[1]       # the encoding's heads, also when q and k come with one head to broadcast
        k = k.expand(B, H, Tk, D)
        if ctx.cache is None and queries_at_the_end(ctx.q_pos, ctx.k_pos):  # the shift as a strided view
            position = self.shifted(qv, self.reversed_rows(layer, q.dtype, ctx), Tk)
        else:
            r = self.rows(layer, q.dtype, ctx)                                      # (n, C)
            dist = distance(ctx.q_pos, ctx.k_pos).clamp(0, len(r) - 1)             # (Tq, Tk); hidden keys masked later
            if dist.numel() < len(r):  # fewer pairs than rows (a window): the pairs' rows
                rd = r.index_select(0, dist.view(-1)).view(Tq, Tk, H, D)            # (Tq, Tk, H, D)
                position = torch.einsum("bhqd,qkhd->bhqk", qv, rd)                  # (B, H, Tq, Tk)
            else:
                P = qv @ r.view(-1, H, D).permute(1, 2, 0)                          # (B, H, Tq, n)
                position = P.gather(-1, dist.expand(B, H, -1, -1))
        scale, qu = 1.0 / math.sqrt(D), q + self.u[:, None].to(q.dtype)           # (B, H, Tq, D)
        # one GEMM forms (q + u).k and adds the position term to it, both scaled: no separate sum
        scores = torch.baddbmm(position.reshape(B * H, Tq, Tk), qu.reshape(B * H, Tq, D),
                               k.reshape(B * H, Tk, D).transpose(1, 2), beta=scale, alpha=scale)
        return scores.view(B, H, Tq, Tk)
