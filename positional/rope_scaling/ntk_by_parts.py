"""NTK-by-parts interpolation (bloc97, July 2023; section 3.2 of the YaRN paper, Peng et
al. 2023, https://arxiv.org/abs/2309.00071).

Pairs whose wavelength turns many times within the original length L keep their
frequency (extrapolated), pairs that turn less than about once are divided by s
(interpolated, as in position interpolation), the ones between are blended linearly:

    theta'_j = (1 - gamma_j) * theta_j / s + gamma_j * theta_j       j = 0 .. D/2 - 1

gamma_j is the share of pair j kept. Two ramps, chosen by rope_ramp:

"index" (default): the YaRN authors' code (jquesnelle/yarn, scaled_rope/
LlamaYaRNScaledRotaryEmbedding.py) and Hugging Face transformers
(`_compute_yarn_parameters` in modeling_rope_utils.py, which reads every released YaRN
config). Solving L theta_j / (2 pi) = beta for j gives the pair that turns beta times:

    d(beta) = D ln(L / (2 pi beta)) / (2 ln base),   low = d(beta_fast), high = d(beta_slow)
    gamma_j = 1 - clamp((j - low) / (high - low), 0, 1)

with low, high rounded outwards to whole pairs (rope_truncate, HF's `truncate`) and clamped to
[0, D - 1] (HF's D - 1, not D/2 - 1: it changes nothing below absurd L).

"turns": the paper's formula, in the turns r_j = L theta_j / (2 pi) of pair j within L:

    gamma_j = clamp((r_j - beta_slow) / (beta_fast - beta_slow), 0, 1)

The index ramp is linear in j (in log r) and rounded outwards to whole pairs, so it keeps more
(tests/test_yarn.py compares the two on numbers).
"""
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..base import setting
from .base import ScalingSettings

RAMPS = ("index", "turns")


@dataclass
class NTKByPartsSettings(ScalingSettings):
    rope_beta_fast: float = 32.0   # pairs turning more than this many times within L are kept
    rope_beta_slow: float = 1.0    # pairs turning fewer times than this are divided by s
    rope_ramp: str = setting("index", choices=RAMPS)   # "index": HF / the YaRN code; "turns": the paper's, in r
    rope_truncate: bool = True     # index ramp: floor/ceil its ends to whole pairs (HF's truncate)
    # checkpoints saved before rope_ramp existed were made with the turns ramp (config.upgrade_model_args)
    older_values: ClassVar[dict] = {"rope_ramp": "turns"}

    def check(self, cfg):
        super().check(cfg)
        if not self.rope_beta_fast > self.rope_beta_slow > 0:
            raise ValueError(f"need rope_beta_fast > rope_beta_slow > 0 (turns within L), got "
                             f"{self.rope_beta_fast} and {self.rope_beta_slow}")


def correction_dim(turns, dim, base, original):
    """d(beta): the (fractional) pair index whose wavelength turns `turns` times within L."""
    return dim * math.log(original / (2 * math.pi * turns)) / (2 * math.log(base))


def kept_share(inv_freq, s, base):
    """gamma_j, (D/2,): 1 where pair j keeps theta_j, 0 where it is divided by s."""
    L, dim = s.rope_original_max_position, 2 * len(inv_freq)
    if s.rope_ramp == "turns":  # linear in the turns r_j within L
        turns = L * inv_freq / (2 * math.pi)
        return ((turns - s.rope_beta_slow) / (s.rope_beta_fast - s.rope_beta_slow)).clamp(0.0, 1.0)
    low, high = correction_dim(s.rope_beta_fast, dim, base, L), correction_dim(s.rope_beta_slow, dim, base, L)
    if s.rope_truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # as HF: avoid 0/0
    j = torch.arange(len(inv_freq), dtype=inv_freq.dtype, device=inv_freq.device)
    return 1 - ((j - low) / (high - low)).clamp(0.0, 1.0)


def ntk_by_parts(inv_freq, s: NTKByPartsSettings, *, base: float, seq_len: int = 0):
    """inv_freq: (D/2,) float64 -> (inv_freq', 1.0), HF's blend of theta / s and theta."""
    kept = kept_share(inv_freq, s, base)
    return inv_freq / s.rope_factor * (1 - kept) + inv_freq * kept, 1.0
