"""Llama 3.1 frequency scaling (Meta, "The Llama 3 Herd of Models", 2024,
https://arxiv.org/abs/2407.21783; the rope_scaling of the Llama 3.1 release: factor 8,
low_freq_factor 1, high_freq_factor 4, original_max_position 8192).

Like NTK-by-parts but measured in wavelengths against the original length L:

    lambda_j = 2 pi / theta_j
    lambda_j < L / high_freq_factor:   theta'_j = theta_j              (short waves kept)
    lambda_j > L / low_freq_factor:    theta'_j = theta_j / s          (long waves interpolated)
    otherwise:  mu = (L / lambda_j - low_freq_factor) / (high_freq_factor - low_freq_factor)
                theta'_j = (1 - mu) * theta_j / s + mu * theta_j
Attention scale 1.
"""
import math
from dataclasses import dataclass

from .base import ScalingSettings


@dataclass
class Llama3Settings(ScalingSettings):
    rope_low_freq_factor: float = 1.0    # wavelengths above L / this are interpolated
    rope_high_freq_factor: float = 4.0   # wavelengths below L / this are kept

    def check(self, cfg):
        super().check(cfg)
        if self.rope_high_freq_factor <= self.rope_low_freq_factor:
            raise ValueError(f"llama3 scaling needs rope_high_freq_factor > rope_low_freq_factor, got "
                             f"{self.rope_high_freq_factor} and {self.rope_low_freq_factor}")


def llama3(inv_freq, s: Llama3Settings, *, base, seq_len=0):
    turns = s.rope_original_max_position * inv_freq / (2 * math.pi)        # L / lambda_j
    lo, hi = s.rope_low_freq_factor, s.rope_high_freq_factor
    mu = ((turns - lo) / (hi - lo)).clamp(0.0, 1.0)
    return (1 - mu) * inv_freq / s.rope_factor + mu * inv_freq, 1.0
