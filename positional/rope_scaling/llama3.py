"""Llama 3.1 frequency scaling (Meta, "The Llama 3 Herd of Models", 2024,
https://arxiv.org/abs/2407.21783; the rope_scaling of the Llama 3.1 release: factor 8,
low_freq_factor 1, high_freq_factor 4, original_max_position 8192).

Like NTK-by-parts but measured in wavelengths against the original length L:

    lambda_j = 2 pi / theta_j
    lambda_j < L / high_freq_factor:   theta'_j = theta_j              (short waves kept)
    lambda_j > L / low_freq_factor:    theta'_j = theta_j / s          (long waves interpolated)
    otherwise:  mu = (L / lambda_j - low_freq_factor) / (high_freq_factor - low_freq_factor)
                theta'_j = (1 - mu) * theta_j / s + mu * theta_j

Knobs: factor (s), original_max_position (L), low_freq_factor (1), high_freq_factor (4).
Attention scale 1.
"""
from .ntk_by_parts import ramp


def llama3(inv_freq, *, factor, original_max_position, low_freq_factor=1.0, high_freq_factor=4.0, **_):
    if high_freq_factor <= low_freq_factor:
        raise ValueError(f"llama3 scaling needs rope_high_freq_factor > rope_low_freq_factor, got "
                         f"{high_freq_factor} and {low_freq_factor}")
    # L / lambda_j is the number of turns within L: the same ramp as NTK-by-parts
    mu = ramp(inv_freq, original_max_position, low_freq_factor, high_freq_factor)
    return (1 - mu) * inv_freq / factor + mu * inv_freq, 1.0
