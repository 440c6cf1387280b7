"""NTK-aware scaling (bloc97, reddit r/LocalLLaMA, June 2023; formalised in the YaRN paper,
Peng et al. 2023, https://arxiv.org/abs/2309.00071, section 3.1).

Instead of squeezing every frequency the same way, the RoPE base b is enlarged so that
the lowest frequency is interpolated by about s while the highest is barely touched:

    b' = b * s^(d / (d - 2))
    theta'_j = b'^(-2j / d) = theta_j * s^(-2j / (d - 2))     j = 0 .. d/2 - 1

so theta'_0 = theta_0 (no change) and theta'_{d/2-1} = theta_{d/2-1} / s (d the rotary dimension).
"""
import torch

from .base import ScalingSettings


def ntk_factor(inv_freq, factor):
    """theta_j * s^(-2j / (d - 2)) for d = 2 * len(inv_freq)."""
    d = 2 * len(inv_freq)
    j = torch.arange(len(inv_freq), dtype=inv_freq.dtype, device=inv_freq.device)
    return inv_freq * factor ** (-2 * j / (d - 2))


def ntk(inv_freq, s: ScalingSettings, *, base, seq_len=0):
    return ntk_factor(inv_freq, s.rope_factor), 1.0
