"""LongRoPE (Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2 Million Tokens",
https://arxiv.org/abs/2402.13753), in the form Phi-3 released and Hugging Face transformers runs as
rope_type "longrope" (`_compute_longrope_parameters`, modeling_rope_utils.py, checked against v5.24).

Each pair j has its own rescale factor lambda_j (the paper finds them by evolutionary search), in two
lists: one for texts within the original length L, one for texts past it:

    theta'_j = theta_j / lambda_j,    lambda = short_factor if n <= L, else long_factor
    n: the positions in play (the largest position + 1, transformers' seq_len)

and an attention factor m on queries and keys each, on both sides of L (s = rope_factor):

    m = sqrt(1 + ln(s) / ln(L))   for s > 1, 1 for s <= 1;   rope_attention_factor > 0: m as given

Empty lists mean lambda_j = 1 (plain RoPE). The paper's search also leaves the first n^ positions
unscaled; the released form (and this one) does not. Which list applies follows the current length, so
keys are cached raw and re-rotated at every step (length_dependent, as dynamic NTK): a cached step equals
a recompute of the prefix (exactly for one layer; deeper layers' cached values keep their own step's
frequencies). transformers caches rotated keys, so its generation that crosses L keeps the short
factors in the keys cached before.
"""
import math
from dataclasses import dataclass, field

import torch

from ..base import setting
from .base import ScalingSettings


def _factor_problem(name, factors):
    """Why a factor list is not a list of positive numbers (one line), or None."""
    if not isinstance(factors, list) or not all(isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0
                                                for f in factors):
        return f"{name} must be a list of numbers > 0 (one per rotary pair; [] for 1 each), got {factors!r}"
    return None


@dataclass
class LongRoPESettings(ScalingSettings):
    rope_short_factor: list = field(default_factory=list)   # lambda_j used while n <= L; []: 1 for every pair
    rope_long_factor: list = field(default_factory=list)    # lambda_j used once n > L; []: 1 for every pair
    rope_attention_factor: float = setting(0.0, at_least=0)  # > 0: m as given; 0: sqrt(1 + ln s / ln L)
    length_dependent = True

    def check(self, cfg):
        super().check(cfg)
        head_dim = cfg.n_embd // cfg.n_head
        pairs = int(round(head_dim * (cfg.pos_settings or {}).get("rotary_fraction", 1.0))) // 2
        for name in ("rope_short_factor", "rope_long_factor"):
            factors = getattr(self, name)
            problem = _factor_problem(name, factors)
            if problem:
                raise ValueError(problem)
            if factors and len(factors) != pairs:
                raise ValueError(f"{name} has {len(factors)} factors; this model rotates {pairs} pairs per head "
                                 f"(head_dim {head_dim}): give {pairs}, or [] for 1 each")


def attention_factor(s: LongRoPESettings):
    """m, the factor on queries and keys each (transformers' attention_factor)."""
    if s.rope_attention_factor > 0:
        return float(s.rope_attention_factor)
    if s.rope_factor <= 1:
        return 1.0
    return math.sqrt(1 + math.log(s.rope_factor) / math.log(s.rope_original_max_position))


def longrope(inv_freq, s: LongRoPESettings, *, base, seq_len=0):
    """inv_freq: (d/2,) float64 -> (theta / lambda, m), lambda the list of the current length seq_len."""
    factors = s.rope_long_factor if seq_len > s.rope_original_max_position else s.rope_short_factor
    if not factors:
        return inv_freq, attention_factor(s)
    if len(factors) != len(inv_freq):
        raise ValueError(f"longrope: {len(factors)} factors for {len(inv_freq)} rotary pairs; give one per pair")
    lam = torch.tensor(factors, dtype=inv_freq.dtype, device=inv_freq.device)
    return inv_freq / lam, attention_factor(s)
