"""NTK-by-parts interpolation (bloc97, July 2023; section 3.2 of the YaRN paper, Peng et
al. 2023, https://arxiv.org/abs/2309.00071).

Each frequency is treated according to how many full turns its wavelength makes within
the original length L: high frequencies (many turns) are left alone (extrapolated),
low frequencies (less than one turn) are interpolated like position interpolation, and
the ones in between are blended linearly:

    lambda_j = 2 pi / theta_j                      wavelength of pair j
    r_j      = L / lambda_j                        turns within the original length
    gamma(r) = 0 if r < alpha;  1 if r > beta;  (r - alpha) / (beta - alpha) otherwise
    theta'_j = (1 - gamma(r_j)) * theta_j / s + gamma(r_j) * theta_j

Settings: rope_factor (s > 0), rope_original_max_position (L), rope_beta_slow (alpha,
paper: 1) and rope_beta_fast (beta, paper: 32; the paper's LLaMA values). Attention scale 1.
This is the paper's formula in r; Hugging Face's implementation rounds the ramp's ends
to whole channel indices, which differs slightly.
"""
import math
from dataclasses import dataclass

from .base import ScalingSettings


@dataclass
class NTKByPartsSettings(ScalingSettings):
    rope_beta_fast: float = 32.0    # pairs with more turns than this in L are kept
    rope_beta_slow: float = 1.0     # pairs with fewer turns than this are interpolated


def ramp(inv_freq, original_max_position, low, high):
    """gamma(r_j): 0 below `low` turns, 1 above `high` turns, linear in between."""
    turns = original_max_position * inv_freq / (2 * math.pi)
    return ((turns - low) / (high - low)).clamp(0.0, 1.0)


def ntk_by_parts(inv_freq, s: NTKByPartsSettings, *, base, seq_len=0):
    gamma = ramp(inv_freq, s.rope_original_max_position, s.rope_beta_slow, s.rope_beta_fast)
    return (1 - gamma) * inv_freq / s.rope_factor + gamma * inv_freq, 1.0
