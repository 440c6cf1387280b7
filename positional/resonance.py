"""Resonance RoPE (Wang et al. 2024, "Resonance RoPE: Improving Context Length
Generalization of Large Language Models", https://arxiv.org/abs/2403.00071).

Each RoPE wavelength lambda_i = 2 pi / theta_i is rounded to a whole number of tokens:

    theta'_i = 2 pi / round(2 pi / theta_i)

so every channel pair repeats exactly every round(lambda_i) positions: a pair whose
wavelength is shorter than the training length has shown all of its angles in training.
The rounding applies to the angles, after any rope_scaling method (the paper pairs it with YaRN).
"""
import math

import torch

from .rope import RoPE


def resonance(inv_freq):
    """theta' = 2 pi / round(2 pi / theta) for each theta > 0; theta = 0 (a pair that never
    turns, as in p_rope) stays 0. inv_freq: (d/2,) float64 -> (d/2,) float64."""
    wavelength = torch.round(2 * math.pi / inv_freq)            # inf for theta = 0
    return 2 * math.pi / wavelength


class ResonanceRoPE(RoPE):
    name = "resonance_rope"

    def angles(self, positions, inv_freq):
        """(T, r/2) float64 angles m * theta'_i, theta' the rounded frequencies."""
        return positions.to(torch.float64)[:, None] * resonance(inv_freq.to(torch.float64))
