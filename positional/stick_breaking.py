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

Truncated evaluation, exact. The weights are set to 0 where log A_ij < FLOOR (stick_breaking_weights), and with
S_i = the sum of softplus(z_il) over the visible keys nearer than j, log A_ij = logsigmoid(z_ij) - S_i <= -S_i
(logsigmoid <= 0, softplus >= 0): S_i only grows as j goes back. So without gradients or dropout and past CHUNK keys
(evaluations, long evaluations, decoding: stick_breaking_truncated) the keys are taken CHUNK at a time nearest first,
each row carrying S_i, sum A_ij v_j and sum A_ij, and the loop stops once -S_i < FLOOR for every row of every batch
element and head (or the row sees no later key): every weight not formed is one the dense form sets to 0, so the
output is the dense one to float rounding, not an approximation. No bound on |q| |k| is needed. A chunk that no row
sees is skipped (hidden keys break nothing). Where no key breaks the stick (logits very negative) every chunk is
taken. Training (backward reads every weight), dropout (drawn over the whole matrix) and compiled steps (the stop is
read on the host) take the dense form, stick_breaking_dense.
"""
import math

import torch
from torch.nn import functional as F

from .base import PositionalEncoding

FLOOR = -60.0   # log A below which A is 0 (stick_breaking_weights)
# Keys a step of the truncated evaluation (stick_breaking_truncated), and the fewest keys it takes: 256 to 1,024 were
# within 20% of each other both where the stick is spent in the first chunk and where it is never spent, 128 slower
# in the latter, 2,048 in the former; 512 stops soonest among the fast ones
# (`python benchmarks/stick_breaking_chunk.py --chunks=128,256,512,1024,2048 --rounds=5` on the 2-core AMD EPYC,
# busy: 0.018-0.021 s against the dense form's 0.24 s where spent, 0.093-0.108 s against 0.17 s where never spent).
CHUNK = 512


class StickBreaking(PositionalEncoding):
    name = "stick_breaking"

    def attend(self, q, k, v, ctx, layer):
        return stick_breaking(q, k, v, ctx)

    def logits(self, q, k, ctx, layer):
        """z = q . k / sqrt(D) (B, H, Tq, Tk), before the stick is broken: what plots read as its logits."""
        return (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])


def stick_breaking_weights(z, past, broken=0.0):
    """(A, S): A (B, H, Tq, Tk) of the logits z (keys nearest first: latest position first) over the keys `past`
    (strictly before the query and visible; broadcastable bool), `broken` (B, H, Tq) or 0 the sum of softplus(z_il)
    over the nearer keys (those of earlier chunks); with logsigmoid(z) = z - softplus(z),
        log A_ij = logsigmoid(z_ij) - sum_{j < l < i} softplus(z_il) = z_ij - sum_{j <= l < i} softplus(z_il),
    a cumulative sum from the nearest key (exact where A is not small), and S (B, H, Tq) that sum over all these keys.
    A below e^-60 (1e-26, far below what float32 holds beside the near keys' shares) is set to 0: exponentials and
    products near float32's smallest numbers take the processor's slow path (12x on the Xeon of benchmarks/), and most
    of a long row's keys are that far."""
    cum = F.softplus(z).masked_fill_(~past, 0.0).cumsum(-1)                      # -log(1 - beta_il), summed
    if torch.is_tensor(broken):
        cum += broken[..., None]
    log_a = z - cum
    negligible = log_a < FLOOR
    return torch.exp(log_a.clamp_(min=FLOOR)).masked_fill(negligible | ~past, 0.0), cum[..., -1]


def stick_breaking(q, k, v, ctx):
    """y (B, H, Tq, D) of queries q (B, H, Tq, D) over keys and values k, v (B, H, Tk, D) at ctx's positions: the
    truncated evaluation where it gives what the dense one does (no gradient, no dropout, not while compiling: its
    stop reads the host), the dense one otherwise."""
    eager = not torch.compiler.is_compiling()
    if eager and not torch.is_grad_enabled() and not ctx.drops() and k.shape[2] > CHUNK:
        return stick_breaking_truncated(q, k, v, ctx)
    return stick_breaking_dense(q, k, v, ctx)


def logits(q, k):
    """z = q . k / sqrt(D) (B, H, Tq, Tk) in float32 or float64 (the wider of q's and float32)."""
    wide = torch.promote_types(q.dtype, torch.float32)
    return (q.to(wide) @ k.to(wide).transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))


def nearest_first(ctx):
    """(order, seen, d): the keys' order nearest first (a ring's slots: any order), the visibility in that order
    ((Tq, Tk) or (H, Tq, Tk)) and the distances q_pos - k_pos (Tq, Tk) in that order."""
    order = torch.argsort(ctx.k_pos, descending=True, stable=True)
    seen = ctx.seen()[..., order]
    return order, seen, ctx.q_pos[:, None] - ctx.k_pos[order][None, :]


def stick_breaking_dense(q, k, v, ctx):
    """stick_breaking over every (query, key) pair at once (the weights a matrix: what dropout and backward take)."""
    order, seen, d = nearest_first(ctx)
    k, v = k[:, :, order], v[:, :, order]
    a, _ = stick_breaking_weights(logits(q, k), seen & (d > 0))
    rest = 1.0 - a.sum(-1, keepdim=True)                                             # what is left of the stick
    weights = a + rest * (seen & (d == 0))                                           # ...to the query's own value
    return ctx.drop(weights).to(v.dtype) @ v


def stick_breaking_truncated(q, k, v, ctx, chunk=CHUNK):
    """stick_breaking_dense's y, the keys taken `chunk` at a time nearest first, stopping where every later weight
    is 0 by the FLOOR rule: a later key's log A_ij = logsigmoid(z_ij) - S_i - (the softplus of the keys between)
    <= -S_i, S_i the sum of softplus over the keys taken so far, so once -S_i < FLOOR for every row (or the row sees
    no later key) the rest is 0. A chunk no row sees breaks nothing and is skipped."""
    order, seen, d = nearest_first(ctx)
    past, own = seen & (d > 0), seen & (d == 0)
    Tk = len(order)
    last = torch.where(past, torch.arange(Tk, device=past.device), -1).amax(-1)   # each row's farthest past key
    wide = torch.promote_types(q.dtype, torch.float32)
    broken = q.new_zeros(q.shape[:-1], dtype=wide)                                   # S (B, H, Tq)
    y = q.new_zeros(q.shape[:-1] + v.shape[-1:], dtype=wide)                         # sum_j A_ij v_j
    taken = q.new_zeros(q.shape[:-1] + (1,), dtype=wide)                             # sum_j A_ij
    for c in range(0, Tk, chunk):
        if bool(((broken > -FLOOR) | (last < c)).all()):   # every later weight is 0
            break
        part = past[..., c:c + chunk]
        if not bool(part.any()):
            continue
        keys = order[c:c + chunk]
        a, broken = stick_breaking_weights(logits(q, k[:, :, keys]), part, broken)
        y += a @ v[:, :, keys].to(wide)
        taken += a.sum(-1, keepdim=True)
    mine = own.reshape(-1, Tk).any(0).nonzero().squeeze(1)                          # the queries' own keys
    y += ((1.0 - taken) * own[..., mine]) @ v[:, :, order[mine]].to(wide)            # the rest of the stick
    return y.to(v.dtype)
