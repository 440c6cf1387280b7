"""CoPE (Golovneva, Wang, Weston & Sukhbaatar 2024,
"Contextual Position Encoding: Learning to Count What's Important",
https://arxiv.org/abs/2405.18719).

Positions are counted, not given: query i decides with a gate per key which keys count,
and the position of key j is the number of counted keys from j up to i:

    g_ij = sigmoid(q_i . k_j / sqrt(D))                    (0 for keys i cannot see)
    p_ij = min(sum_{t=j..i} g_it, P)                       (fractional, in (0, P])
    e[p] = (p - floor p) e[ceil p] + (1 - p + floor p) e[floor p]   (e: P + 1 learned vectors)
    logit(i, j) = (q_i . k_j + q_i . e[p_ij]) / sqrt(D)

q_i . e[p] is computed for the P + 1 integers and interpolated. e: (P + 1, D) per layer, shared
by the heads, zeros at the start (NoPE), as in the paper. Only which keys are visible counts
(window and documents included), so shifting every position changes nothing.
Settings: cope_max_position (P; 0: the training length). Counts past P share e[P].
"""
import math
from dataclasses import dataclass

import torch
from torch import nn

from .base import OwnLogits, Settings, setting


@dataclass
class CoPESettings(Settings):
    cope_max_position: int = setting(0, at_least=0, why="0: block_size", length=True)   # P; 0: block_size


def cope_positions(gates, max_position, ring=None):
    """p_ij = min(sum of g_it over keys t at j's position or later, P): gates (..., Tq, Tk), zero where hidden
    (or, by ring, summed after every key the query sees); ring: (the keys from the latest position back, the
    permutation back to the keys' own order) where a cache's ring holds them rotated, None where they are in order."""
    if ring is None:
        return gates.flip(-1).cumsum(-1).flip(-1).clamp(max=max_position)
    latest_first, back = (i.expand_as(gates) for i in ring)    # gather: a fraction of index_select's time here
    return gates.gather(-1, latest_first).cumsum(-1).clamp_(max=max_position).gather(-1, back)


def latest_first(k_pos, hidden=None):
    """(the keys from the latest position back, and last those hidden (Tk,) from the one query there is: their
    gates then add to no count it reads; the permutation back to the keys' own order)."""
    order = (k_pos if hidden is None else k_pos.masked_fill(hidden, -1)).argsort(descending=True, stable=True)
    return order, order.argsort()


def f32(x):
    """x in float32 or wider (the gates and the table under autocast), without a call where it is already."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def interpolate(table, p):
    """table (..., Tq, P + 2) of q . e[n] at integers n, e[P + 1] = e[P]; p (..., Tq, Tk) in [0, P] -> q . e[p]."""
    lo = p.long()                                           # p >= 0: its floor, with no gradient
    w = p - lo                                              # the gradient flows through p here
    return torch.lerp(table.gather(-1, lo), table.gather(-1, lo + 1), w)


class CoPE(OwnLogits):
    name = "cope"
    Settings = CoPESettings
    recompute_rows = 128   # training by blocks of 128 query rows, recomputed in backward (positional/base.py)

    def __init__(self, n_layer: int, head_dim: int, max_position: int):
        super().__init__()
        self.max_position = max_position
        # band: keys whose count reaches P share e[P]; 4 P keys behind, the gates' sum (about half a key each at
        # initialisation) mostly has, and far_holds says where it has not
        self.band = 4 * max_position
        self.emb = nn.Parameter(torch.zeros(n_layer, max_position + 1, head_dim))   # e: (L, P + 1, D)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_embd // cfg.n_head, s.cope_max_position or cfg.block_size)

    def far(self, q, k, v, ctx, layer):
        """q.k / sqrt(D) + q.e[P] / sqrt(D), the last a constant per query."""
        scale = 1.0 / math.sqrt(q.shape[-1])
        return q * scale, k, v, (q @ self.emb[layer, -1].to(q.dtype)) * scale

    def far_holds(self, q, k, ctx, layer):
        """Whether the gates of the band's keys (d < W) already sum to P: every key behind them counts P."""
        d = ctx.q_pos[:, None] - ctx.k_pos[None, :]
        gates = torch.sigmoid((q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1]))
        return gates.masked_fill((d < 0) | (d >= self.band), 0.0).sum(-1) >= self.max_position

    def position_term(self, qa, s, ctx, layer):
        """q_i . e[p_ij] / sqrt(D) (B, H, Tq, Tk) from qa = q / sqrt(D) and the scaled scores s = qa . k."""
        gates, hidden = torch.sigmoid(f32(s)), ctx.hidden()                    # hidden (Tq, Tk): window, documents
        one = hidden.shape[:-1].numel() == 1    # one row (a decode step): its hidden keys last in ring, no mask
        ring = None if ctx.cache is None else ctx.once(   # the forward's, or a one-row block's own
            (id(self), "ring", ctx.rows.start if one else "all"),
            lambda: latest_first(ctx.k_pos, hidden.reshape(-1) if one else None))
        if ring is None or not one:
            gates = gates.masked_fill(hidden, 0.0)
        p = cope_positions(gates, float(self.max_position), ring)               # (B, H, Tq, Tk)
        emb = self.table(layer, qa.dtype) if ctx.cache is None else ctx.cache.state(     # kept for a generation
            self, ("emb", layer), lambda: self.table(layer, qa.dtype).detach())
        return interpolate(f32(qa @ emb), p)                                # from q.e[n] / sqrt(D) (B, H, Tq, P + 2)

    def table(self, layer, dtype):
        """(D, P + 2): e[0..P] and e[P] once more, for interpolate."""
        e = self.emb[layer]
        return torch.cat([e, e[-1:]]).to(dtype).T

    def one_query(self, q, k, v, ctx, layer):
        """q . k_j / sqrt(D), the position term a bias over the keys."""
        qa = q * (1.0 / math.sqrt(q.shape[-1]))
        return qa, k, v, self.position_term(qa, qa @ k.transpose(-1, -2), ctx, layer)

    def logits(self, q, k, ctx, layer):
        qa = q * (1.0 / math.sqrt(q.shape[-1]))
        s = qa @ k.transpose(-1, -2)                                            # (B, H, Tq, Tk)
        return s + self.position_term(qa, s, ctx, layer)
