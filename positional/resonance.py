"""Resonance RoPE (Wang et al. 2024, "Resonance RoPE: Improving Context Length
Generalization of Large Language Models", https://arxiv.org/abs/2403.00071).

Each RoPE wavelength lambda_i = 2 pi / theta_i is rounded to a whole number of tokens:

    theta'_i = 2 pi / round(2 pi / theta_i)

so every channel pair repeats exactly every round(lambda_i) positions: a pair whose
wavelength is shorter than the training length has already shown all of its angles in
training, and positions past it fall on angles seen before (the paper's argument against
out-of-distribution features; it matters for the pairs with lambda_i < L). A wavelength
below one half would round to 0; it cannot occur here (theta_i <= 1, lambda_i >= 2 pi).

Why an encoding (`resonance_rope`, a RoPE subclass) and not a setting of RoPE: it is a
choice of frequencies that composes with every rope_scaling method, so it must come
*after* the method (round the scaled wavelengths; the paper pairs it with YaRN); a
method is one name, so a second method key would be needed, and a boolean on RoPE's
settings would also reach xpos and rerope silently. As its own name it is selected,
compared (compare.py, bench.py) and listed like any encoding. The rounding is applied to
the angles, so it also follows dynamic NTK's per-length frequencies.

Settings: RoPE's (rope_base, rotary_fraction) and every rope_scaling method. A `rope`
checkpoint loads into it unchanged (same weights, slightly different angles).
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
