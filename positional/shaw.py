"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018, "Self-Attention with
Relative Position Representations", https://arxiv.org/abs/1803.02155).

Each layer learns one vector per clipped distance, shared by its heads, for the keys
(w^K) and optionally for the values (w^V):

    e_ij = q_i . (k_j + w^K[d_ij]) / sqrt(D)            d_ij = min(i - j, k)
    z_i  = sum_j softmax_j(e_ij) (v_j + w^V[d_ij])

Causal, so only distances 0 .. k exist (k + 1 vectors per table). With k at least the
sequence length, every distance has its own vector (the paper's unclipped form).
No (Tq, Tk, D) tensor: q @ w^K.T, (B, H, Tq, k+1), is read at d_ij into the matrix q k^T
is added to (one baddbmm); the value term sums the probabilities per distance, then @ w^V.
"""
import math

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .base import OwnLogits, Settings, distance, setting


@dataclass
class ShawSettings(Settings):
    shaw_max_distance: int = setting(16, at_least=1)   # k: distances past it share one embedding
    shaw_values: bool = True      # also learn relative value embeddings


class Shaw(OwnLogits):
    name = "shaw"
    Settings = ShawSettings

    def __init__(self, n_layer: int, head_dim: int, max_distance: int = 16, values: bool = True):
        super().__init__()
        self.max_distance = max_distance
        self.band = max_distance   # keys k or more behind a query share w^K[k] (and w^V[k]): far()
        self.key_emb = nn.Parameter(torch.randn(n_layer, max_distance + 1, head_dim) * 0.02)   # (L, k+1, D)
        self.value_emb = (nn.Parameter(torch.randn(n_layer, max_distance + 1, head_dim) * 0.02)
                          if values else None)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_embd // cfg.n_head, s.shaw_max_distance, s.shaw_values)

    def distances(self, q_pos, k_pos):
        """(Tq, Tk) clipped distance index min(i - j, k); future keys get 0 (masked anyway)."""
        return distance(q_pos, k_pos).clamp(0, self.max_distance)

    def one_hot(self, q_pos, k_pos, batch_heads, dtype):
        """(Tq, Tk, k+1) indicator of d_ij where it is no larger than a (B, H, Tq, Tk) tensor (training),
        else None: a product with it is faster than gather and its backward on CPU (benchmarks/)."""
        if self.max_distance + 1 > batch_heads:
            return None
        return F.one_hot(self.distances(q_pos, k_pos), self.max_distance + 1).to(dtype)

    def far(self, q, k, v, ctx, layer):
        """q.k / sqrt(D) + q.w^K[k] / sqrt(D), the last a constant per query; the values v + w^V[k]."""
        scale = 1.0 / math.sqrt(q.shape[-1])
        r = (q @ self.key_emb[layer, -1].to(q.dtype)) * scale                    # (B, H, T)
        va = v if self.value_emb is None else v + self.value_emb[layer, -1].to(v.dtype)
        return q * scale, k, va, r

    def one_query(self, q, k, v, ctx, layer):
        """q . (k_j + w^K[d_j]) / sqrt(D) and v_j + w^V[d_j]: the embeddings added to the keys and values."""
        d = ctx.once((id(self), "d", ctx.rows.start), lambda: self.distances(ctx.q_pos, ctx.k_pos)[0])   # (Tk,)
        ka = k + self.key_emb[layer].index_select(0, d).to(k.dtype)                 # (B, H, Tk, D)
        va = v if self.value_emb is None else v + self.value_emb[layer].index_select(0, d).to(v.dtype)
        return q * (1.0 / math.sqrt(q.shape[-1])), ka, va, None

    @property
    def flex_formed(self):
        """Without relative values: their term sums the probabilities per distance, which FlexAttention does not
        give (on CPU not even its log-sum-exp, from which the near band's would follow)."""
        return self.value_emb is None

    def flex_form(self, q, k, v, ctx, layer):
        """q.k / sqrt(D) plus q.w^K[d] / sqrt(D), read from the (B, H, Tq, k+1) products at the clipped distance."""
        scale = 1.0 / math.sqrt(q.shape[-1])
        rel = (q @ self.key_emb[layer].to(q.dtype).T) * scale                  # (B, H, Tq, k+1)
        top = self.max_distance

        def relative(b, h, qi, ki, qp, kp):
            return rel[b, h, qi, (qp(qi) - kp(ki)).clamp(0, top)]
        return q * scale, k, v, relative

    def logits(self, q, k, ctx, layer):
        q_pos, k_pos = ctx.q_pos, ctx.k_pos
        B, H, Tq, D = q.shape
        Tk, scale = k.shape[2], 1.0 / math.sqrt(D)
        rel = q @ self.key_emb[layer].to(q.dtype).T                          # (B, H, Tq, k+1)
        e = self.one_hot(q_pos, k_pos, B * H, q.dtype)
        if e is not None:
            rel = torch.einsum("bhqn,qkn->bhqk", rel, e)                     # (B, H, Tq, Tk)
        else:
            rel = rel.gather(-1, self.distances(q_pos, k_pos).expand(B, H, -1, -1))
        scores = torch.baddbmm(rel.reshape(B * H, Tq, Tk), q.reshape(B * H, Tq, D),
                               k.reshape(B * H, Tk, D).transpose(1, 2), beta=scale, alpha=scale)
        return scores.view(B, H, Tq, Tk)                                     # (q.k + q.w^K[d]) / sqrt(D)

    def value_term(self, probs, ctx, layer):
        """sum_j p_ij w^V[d_ij]: (B, H, Tq, D)."""
        if self.value_emb is None:
            return None
        q_pos, k_pos = ctx.q_pos, ctx.k_pos
        B, H = probs.shape[:2]
        e = self.one_hot(q_pos, k_pos, B * H, probs.dtype)
        if e is not None:
            per_distance = torch.einsum("bhqk,qkn->bhqn", probs, e)          # (B, H, Tq, k+1)
        else:
            d = self.distances(q_pos, k_pos).expand_as(probs)                # (B, H, Tq, Tk)
            per_distance = probs.new_zeros(*probs.shape[:-1], self.max_distance + 1).scatter_add_(-1, d, probs)
        return per_distance @ self.value_emb[layer].to(probs.dtype)          # (B, H, Tq, D)
