"""Stick-breaking attention (Tan, Yang, Courville, Panda & Shen 2024, "Scaling Stick-Breaking Attention: An
Efficient Implementation and In-depth Study", https://arxiv.org/abs/2410.17980), in place of softmax. No position
signal at all: the order of the keys alone makes the weights, so any length works and a shift changes nothing.

For query i and each key j before it (j < i: the paper breaks the stick over the tokens before the current one,
"for each token before the current, we determine a break point"), nearest first:

    z_ij    = q_i . k_j / sqrt(D)
    beta_ij = sigmoid(z_ij)                                   the share of what is left that key j takes
    A_ij    = beta_ij * prod_{j < l < i} (1 - beta_il)
    log A_ij = -softplus(-z_ij) - sum_{j < l < i} softplus(z_il)     (log space, as the paper computes it)
    y_i     = sum_{j < i} A_ij v_j + (1 - sum_{j < i} A_ij) v_i

No softmax: the A_ij sum to at most 1, and what is left of the stick goes to the query's own value v_i, as the
authors' reference does (shawntan/stickbreaking-attention, tests/test_attn.py: o + rem * v). The paper's text was
not at hand here (its equation numbers are not cited): the weights follow its abstract and that reference.

Visibility (ctx.seen(): window, sinks, documents) decides which keys take part: a hidden key takes no share and
breaks nothing (it contributes 0 to the sum over l); the "nearest first" order is the keys' positions, so that a
window's ring of cache slots works as the forward does. With a KV cache a decode step is the same formula over the
cached keys: nothing is kept besides them.
"""
import math

import torch
from torch.nn import functional as F

from .base import PositionalEncoding

FLOOR = -60.0   # log A below which A is 0 (stick_breaking_weights)


class StickBreaking(PositionalEncoding):
    name = "stick_breaking"

    def attend(self, q, k, v, ctx, layer):
        return stick_breaking(q, k, v, ctx)

    def logits(self, q, k, ctx, layer):
        """z = q . k / sqrt(D) (B, H, Tq, Tk), before the stick is broken: what plots read as its logits."""
        return (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])


def stick_breaking_weights(z, past):
    """A (B, H, Tq, Tk) of the logits z (keys nearest first: latest position first) over the keys `past` (strictly
    before the query and visible; broadcastable bool): with logsigmoid(z) = z - softplus(z),
        log A_ij = logsigmoid(z_ij) - sum_{j < l < i} softplus(z_il) = z_ij - sum_{j <= l < i} softplus(z_il),
    a cumulative sum from the nearest key (exact where A is not small). A below e^-60 (1e-26, far below what float32
    holds beside the near keys' shares) is set to 0: exponentials and products near float32's smallest numbers take the
    processor's slow path (12x on the Xeon of benchmarks/), and most of a long row's keys are that far."""
    broken = F.softplus(z).masked_fill_(~past, 0.0)                                 # -log(1 - beta_il)
    log_a = z - broken.cumsum(-1)
    negligible = log_a < FLOOR
    return torch.exp(log_a.clamp_(min=FLOOR)).masked_fill(negligible | ~past, 0.0)


def stick_breaking(q, k, v, ctx):
    """y (B, H, Tq, D) of queries q (B, H, Tq, D) over keys and values k, v (B, H, Tk, D) at ctx's positions."""
    order = torch.argsort(ctx.k_pos, descending=True, stable=True)   # nearest first (a ring's slots: any order)
    k, v, k_pos = k[:, :, order], v[:, :, order], ctx.k_pos[order]
    seen = ctx.seen()[..., order]                                                    # (Tq, Tk) or (H, Tq, Tk)
    d = ctx.q_pos[:, None] - k_pos[None, :]
    wide = torch.promote_types(q.dtype, torch.float32)                              # float32 or float64
    z = (q.to(wide) @ k.to(wide).transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))   # (B, H, Tq, Tk)
    a = stick_breaking_weights(z, seen & (d > 0))
    rest = 1.0 - a.sum(-1, keepdim=True)                                             # what is left of the stick
    weights = a + rest * (seen & (d == 0))                                           # ...to the query's own value
    return ctx.drop(weights).to(v.dtype) @ v
