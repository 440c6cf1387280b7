"""Position interpolation (Chen et al. 2023, "Extending Context Window of Large Language
Models via Positional Interpolation", https://arxiv.org/abs/2306.15595).

Positions are divided by the factor s, so a sequence s times longer than the training
length is squeezed into the trained range of angles. Dividing the position is the same
as dividing every inverse frequency:

    theta'_j = theta_j / s                     attention scale 1   (the paper then fine-tunes briefly)
"""
from .base import ScalingSettings


def linear(inv_freq, s: ScalingSettings, *, base, seq_len=0):
    return inv_freq / s.rope_factor, 1.0
