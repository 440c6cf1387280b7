"""FLOATER: positions from a continuous dynamical system (Liu, Yu, Dhillon & Hsieh, ICML 2020,
"Learning to Encode Position for Transformer with Continuous Dynamical Model", arXiv:2003.09229).

The position vector p(t) (C,) solves a neural ODE, and token k gets p at time k:

    dp/dt = h(p, t),   p(0) = p0 (learned),   h(p, t) = W2 tanh(W1 p + u t + b1) + b2

    x_k -> x_k + p(k Δ)        Δ = floater_dt, the time between two positions

The sinusoidal table is a special solution (the paper's remark): with h(p, t) = A p, A block-diagonal
with blocks [[0, ω_i], [-ω_i, 0]] and p0 = (0, 1, 0, 1, ...), p(t) = (sin ω_i t, cos ω_i t, ...).
What differs from the paper: a fixed-step RK4 solver (`floater_steps` steps per position) instead
of an adaptive one, so a forward's cost is fixed and it compiles; p is added to the input of the
first layer only. Δ is small (0.01): with Δ = 1 a small h moved p(255) far enough to drown the
tokens (measured: the tests' tiny training run stayed at val loss 3.18, from 3.52).
"""
import functools
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .base import PositionalEncoding, Settings, setting


def rk4(h, p0, n, steps=4, unit=1.0, start=0):
    """(n, C) p at times start, start + 1, .., start + n - 1 (in units) of dp/dt = h(p, t) from p(start unit) = p0,
    `steps` RK4 steps per unit."""
    out = [p0]
    for k in range(start, start + n - 1):   # the loop is host-bound: O(n steps) small ops
        out.append(rk4_unit(h, out[-1], k, steps, unit))
    return torch.stack(out)


def rk4_unit(h, p, k, steps, unit, fractions=None):
    """p at time (k + 1) unit from p at k unit: `steps` RK4 steps (k an int; or a tensor inside a decode step, with
    fractions, stage_fractions(steps) as a tensor: its stages' times then come from one product)."""
    dt = unit / steps
    times = [(k + f) * unit for f in stage_fractions(steps)] if fractions is None else ((k + fractions) * unit).unbind()
    for s in range(steps):   # one op per sum (alpha scales the added term)
        t, mid, end = times[3 * s:3 * s + 3]
        k1 = h(p, t)
        k2 = h(torch.add(p, k1, alpha=dt / 2), mid)
        k3 = h(torch.add(p, k2, alpha=dt / 2), mid)
        k4 = h(torch.add(p, k3, alpha=dt), end)
        p = torch.add(p, torch.add(k1, k2, alpha=2).add_(k3, alpha=2).add_(k4), alpha=dt / 6)
    return p


@functools.lru_cache
def stage_fractions(steps):
    """Where RK4's stages fall in a unit of time: each of the `steps` steps' start, middle and end, in that order
    (made once per `steps`: the prompt path asks for them at every position)."""
    return tuple((s + f) / steps for s in range(steps) for f in (0.0, 0.5, 1.0))


@dataclass
class FloaterSettings(Settings):
    floater_steps: int = setting(4, at_least=1)        # RK4 steps per position
    floater_width: int = setting(32, at_least=1)       # hidden width of the MLP h
    floater_dt: float = setting(0.01, above=0)         # Δ: time from one position to the next


class Floater(PositionalEncoding):
    name = "floater"
    Settings = FloaterSettings

    def __init__(self, n_embd, steps=4, width=32, dt=0.01):
        super().__init__()
        self.n_embd, self.steps, self.dt = n_embd, steps, dt
        self.p0 = nn.Parameter(0.02 * torch.randn(n_embd))
        self.w1, self.u = nn.Linear(n_embd, width), nn.Parameter(torch.randn(width))
        self.w2 = nn.Linear(width, n_embd)
        nn.init.normal_(self.w2.weight, std=0.02 / width ** 0.5)
        nn.init.zeros_(self.w2.bias)
        self.register_buffer("stages", torch.tensor(stage_fractions(steps)), persistent=False)   # for a decode step

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_embd, s.floater_steps, s.floater_width, s.floater_dt)

    def h(self, p, t):
        """W2 tanh(W1 p + u t + b1) + b2, in three ops besides tanh (no module calls: rk4 runs it 16 times a position);
        t a float, or a tensor in a decode step."""
        b = torch.add(self.w1.bias, self.u, alpha=t) if isinstance(t, float) else torch.addcmul(self.w1.bias, self.u, t)
        return F.linear(torch.tanh(F.linear(p, self.w1.weight, b)), self.w2.weight, self.w2.bias)

    def table(self, n):
        return rk4(self.h, self.p0, n, self.steps, self.dt)                                # (n, C)

    def embed(self, x, ctx):
        table = self.table(ctx.n_positions) if ctx.cache is None else self.solved(ctx)
        return x + table[ctx.q_pos].to(x.dtype)                                 # (B, T, C) + (T, C)

    def solved(self, ctx):
        """The table's rows kept in the cache, solved as a generation reaches them (rows past `done` are not yet):
        a one-token call solves its own row from the row before it (one position of RK4 inside the decode step, so
        a compiled step does it in its graph and nothing is solved ahead), a longer call (a prompt) the rows from the
        last one solved up to its last position, as does a token past the next row (explicit positions that skip;
        a compiled step's positions do not)."""
        rows = ctx.kept(self, "rows", lambda a, b: self.p0.new_zeros(b - a, self.n_embd))   # (n_positions, C)
        done = ctx.cache.state(self, "done", lambda: torch.zeros(1, dtype=torch.long, device=self.p0.device))
        q = ctx.q_pos
        with torch.no_grad():
            if len(q) == 1 and (torch.compiler.is_compiling() or int(done) == int(q)):   # the next row (a decode step)
                before = (q - 1).clamp(min=0)                                   # (1,); position 0 is p0 itself
                p = rk4_unit(self.h, rows.index_select(0, before), before, self.steps, self.dt, self.stages)   # (1, C)
                rows.index_copy_(0, q, torch.where(q[:, None] == 0, self.p0, p))
                done.copy_(torch.maximum(done, q + 1))
                return rows
            a, b = int(done), int(q.max()) + 1   # a prompt: on the host, once
            if b > a:
                new = rk4(self.h, rows[a - 1] if a else self.p0, b - a + bool(a), self.steps, self.dt, max(a - 1, 0))
                rows[a:b] = new[1:] if a else new
                done.fill_(b)
        return rows
