"""RoPE with learned frequencies: each pair's frequency is RoPE's times a learned factor,

    theta_i = base^(-2i/d) * exp(alpha_i),   alpha (d/2,) learned, initialised at 0 (= RoPE)

one alpha shared by the heads and layers (as RoPE's frequencies are). The exp keeps every
frequency positive, alpha a log-scale step. A rope_scaling method transforms base^(-2i/d) first.
"""
import torch
from torch import nn

from .rope import RoPE


class RoPELearnedFreq(RoPE):
    name = "rope_learned_freq"

    def __init__(self, head_dim, rotary_fraction=1.0, base=10000.0, scaling=None):
        super().__init__(head_dim, rotary_fraction, base, scaling)
        self.alpha = nn.Parameter(torch.zeros(self.rotary_dim // 2))     # (r/2,) log-factors

    def angles(self, positions, inv_freq):
        """(T, r/2) float64 angles m * theta_i * exp(alpha_i), differentiable in alpha."""
        return super().angles(positions, inv_freq * self.alpha.to(torch.float64).exp())
