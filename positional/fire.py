"""FIRE: functional interpolation for relative positions (Li et al. 2023, "Functional
Interpolation for Relative Positions Improves Long Context Transformers",
https://arxiv.org/abs/2310.04418).

A small MLP f (1 -> width -> H, ReLU) of a progressively normalised distance gives
each head's bias:

    score(i, j) += f( psi(i - j) / psi(max(L, i)) )_h,      psi(x) = log(c * x + 1)

i is the query's position, so the input stays in [0, 1] at any length: far past the
training length, distances are interpolated rather than extrapolated. c and L are
learned (L as a multiplier of its initial value, as in the paper's implementation).
While i < L the normaliser is the constant psi(L) and the bias depends on i - j only;
beyond L it is not translation invariant, by design. At distance 0 the bias is f(0).
One MLP serves all layers. With one hidden ReLU layer, f is piecewise linear in its input: its
knots are the units' zeros -b1/w1, and on each piece between two knots f = slope * x + intercept
(`pieces`). f is evaluated that way, exactly, without a hidden layer: one search among the knots and
two reads per input and head. It runs once per distinct input: at the distances 0 .. max(i - j) for
the queries before L (read at each pair), at each pair for the queries past L.
"""
from dataclasses import dataclass

import torch
from torch import nn

from .base import PositionalEncoding, Settings, setting

EPS = 1e-6


def fire_input(q_pos, k_pos, c, L):
    """(Tq, Tk) normalised distances psi(i - j) / psi(max(L, i)); future keys give 0."""
    q = q_pos.to(c.dtype)
    dist = (q[:, None] - k_pos.to(c.dtype)[None, :]).clamp_(min=0)        # (Tq, Tk), exact below 2^24
    return psi_ratio(dist, torch.maximum(q, L.abs())[:, None], c)        # normaliser (Tq, 1)


def psi_ratio(dist, norm, c):
    """psi(dist) / psi(norm) for integer distances and a normaliser broadcastable to them."""
    c = c.abs()
    return torch.log1p(c * dist.to(c.dtype)) / (torch.log1p(c * norm) + EPS)


def pieces(mlp):
    """The ReLU MLP 1 -> W -> H as the piecewise-linear function it is: its W knots -b1/w1 sorted (inf for
    a unit whose weight is 0), and the slope and intercept of each of the W + 1 pieces, (W + 1, H) each,
    piece s lying between knots s - 1 and s. Along a piece every unit is on or off throughout: read at
    one point inside it. Fixed shapes, no host reads (a compiled decode step calls it)."""
    w1, b1, w2, b2 = mlp[0].weight[:, 0], mlp[0].bias, mlp[2].weight, mlp[2].bias
    knots = torch.where(w1 != 0, -b1 / w1, torch.inf).sort().values.detach()        # (W,)
    inf = knots.new_full((1,), torch.inf)
    lo, hi = torch.cat([-inf, knots]), torch.cat([knots, inf])                         # each piece's ends
    inside = torch.where(lo.isinf(), hi - 1, torch.where(hi.isinf(), lo + 1, (lo + hi) / 2))
    inside = torch.where(inside.isfinite(), inside, 0.0)                               # empty pieces past inf
    on = (inside[:, None] * w1 + b1 > 0).to(w1.dtype)                                  # (W + 1, W)
    return knots, on @ (w1[:, None] * w2.T), on @ (b1[:, None] * w2.T) + b2


def by_pieces(mlp, x):
    """mlp(x[..., None]) moved to the front, (H, *x.shape), by pieces: equal to it up to float rounding."""
    knots, slope, intercept = pieces(mlp)
    s, flat = torch.searchsorted(knots, x.detach()).view(-1), x.reshape(-1)           # x's piece
    def head(h, out=None):   # a head at a time: 1-D reads
        return torch.addcmul(intercept[:, h].index_select(0, s), slope[:, h].index_select(0, s), flat, out=out)
    if torch.is_grad_enabled():
        return torch.stack([head(h) for h in range(slope.shape[1])]).view(-1, *x.shape)
    out = flat.new_empty(slope.shape[1], len(flat))   # no gradient: written in place, not copied by stack
    for h in range(len(out)):
        head(h, out[h])
    return out.view(-1, *x.shape)


@dataclass
class FIRESettings(Settings):
    fire_mlp_width: int = setting(32, at_least=1)     # hidden units of the bias MLP (32 in the paper)
    fire_init_c: float = setting(0.1, above=0)        # initial c of psi(x) = log(c x + 1)
    fire_init_L: int = setting(0, at_least=0, why="0: block_size", length=True)   # initial threshold L; 0: block_size


class FIRE(PositionalEncoding):
    name = "fire"
    Settings = FIRESettings

    def __init__(self, n_head: int, width: int = 32, init_c: float = 0.1, init_L: float = 512.0):
        super().__init__()
        self.n_head = n_head
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, n_head))
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("init_L", torch.tensor(float(init_L)), persistent=False)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_head, s.fire_mlp_width, s.fire_init_c, s.fire_init_L or cfg.block_size)

    @property
    def L(self):
        return self.L_multiplier * self.init_L

    def score_bias(self, h, q, k):
        """Elementwise, as a FlexAttention score_mod calls it (scalars, or tensors that broadcast): the MLP's
        units summed one by one, f_h(x) = b2_h + sum_u w2_hu relu(w1_u x + b1_u). A dense caller reads
        dense_bias (by pieces: one search and two reads a pair instead of the W units)."""
        c, L = self.c, self.L.abs()
        x = psi_ratio((q - k).clamp(min=0), torch.maximum(q.to(c.dtype), L), c)
        w1, b1, w2, b2 = self.mlp[0].weight[:, 0], self.mlp[0].bias, self.mlp[2].weight, self.mlp[2].bias
        out = b2[h]
        for u in range(len(w1)):
            out = out + w2[h, u] * torch.relu(w1[u] * x + b1[u])
        return out

    def dense_bias(self, q_pos, k_pos):
        """(H, Tq, Tk): every head at once, as the MLP gives them (no copy picking the heads)."""
        L = self.L.abs()
        rising = len(q_pos) > 1 and bool((q_pos[1:] > q_pos[:-1]).all())   # not so where documents restart
        m = int((q_pos.to(L.dtype) < L).sum()) if rising else 0           # leading queries, normalised by psi(L)
        dist = (q_pos[:m, None] - k_pos[None, :]).clamp(min=0)           # (m, Tk)
        n = int(dist.max()) + 1 if m else 0
        parts = []
        if m and dist.numel() > n:  # more pairs than distances: f once per distance, read at each pair
            table = by_pieces(self.mlp, psi_ratio(torch.arange(n, device=dist.device), L, self.c))   # (H, n)
            parts.append(table.index_select(1, dist.view(-1)).view(-1, *dist.shape))         # (H, m, Tk)
            q_pos = q_pos[m:]
        if len(q_pos):  # queries past L (or a decode step's few pairs): f at each pair
            parts.append(by_pieces(self.mlp, fire_input(q_pos, k_pos, self.c, self.L)))   # (H, Tq', Tk)
        return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]    # (H, Tq, Tk)
