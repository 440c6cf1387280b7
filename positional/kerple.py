"""KERPLE: kernelized relative positional embedding (Chi, Fan, Ramadge & Rudnicky 2022,
"KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation",
https://arxiv.org/abs/2205.09921).

A conditionally positive definite kernel of the distance, with two learned positive
parameters per head, is added to the attention logits:

    log variant:    score(i, j) += -r1_h * log(1 + r2_h * |i - j|)
    power variant:  score(i, j) += -r1_h * |i - j| ** r2_h          (0 < r2_h <= 2)

Both are 0 at distance 0. ALiBi is the power variant with r2 = 1 and r1 fixed.
Positivity (and r2 <= 2 for the power variant) is kept by clamping in the forward pass;
the first values are drawn uniformly, r1 in (0, 2) and r2 in (0, 1).
"""
from dataclasses import dataclass

import torch
from torch import nn

from .base import PositionalEncoding, Settings, setting

VARIANTS = ("log", "power")
EPS = 1e-2   # smallest value a parameter is clamped to


def kerple_bias(distance, r1, r2, variant="log"):
    """(H, ...) bias for a distance tensor (...,) >= 0 and per-head r1, r2 (H,)."""
    shape = (-1,) + (1,) * distance.dim()
    return kernel(distance[None], r1.view(shape), r2.view(shape), variant)


def kernel(d, r1, r2, variant):
    """The bias at distances d >= 0 with parameters r1, r2, all broadcast together."""
    d = d.to(r1.dtype)
    if variant == "log":
        return -r1 * torch.log1p(r2 * d)
    return -r1 * d.pow(r2)


@dataclass
class KerpleSettings(Settings):
    kerple_variant: str = setting("log", choices=VARIANTS)   # "log": -r1 log(1 + r2 d); "power": -r1 d^r2


class Kerple(PositionalEncoding):
    name = "kerple"
    relative_bias = True
    Settings = KerpleSettings

    def __init__(self, n_head: int, variant: str = "log"):
        super().__init__()
        self.variant, self.n_head = variant, n_head
        self.r1 = nn.Parameter(torch.rand(n_head) * 2)   # (H,)
        self.r2 = nn.Parameter(torch.rand(n_head))       # (H,)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_head, s.kerple_variant)

    def params(self, h=slice(None)):
        """(r1, r2) of heads h, read and then clamped to the kernel's valid range (a score_mod must index a
        tensor needing a gradient once and directly: FlexAttention's backward on CUDA)."""
        r2_max = 2.0 if self.variant == "power" else None
        return self.r1[h].clamp(min=EPS), self.r2[h].clamp(min=EPS, max=r2_max)

    def score_bias(self, h, q, k):
        """Several queries: the kernel once per distance 0 .. max |i - j|, read at each pair. One query
        (a decode step, a score_mod's scalars): at each pair, nothing read back to the host."""
        d = (q - k).abs()
        if q.numel() > 1 and d.numel() > (n := int(d.max()) + 1):  # more pairs than distances
            return kerple_bias(torch.arange(n, device=d.device), *self.params(), self.variant)[h, d]   # table (H, n)
        return kernel(d, *self.params(h), self.variant)

    def extra_repr(self):
        return f"name={self.name!r}, variant={self.variant!r}"
