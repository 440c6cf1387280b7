"""YaRN (Peng, Quesnelle, Fan & Shippole 2023, "YaRN: Efficient Context Window Extension of
Large Language Models", https://arxiv.org/abs/2309.00071, section 3.4).

NTK-by-parts frequencies (see ntk_by_parts.py) plus an attention temperature t:

    softmax(q.k / (t sqrt(D))),   sqrt(1 / t) = 0.1 ln(s) + 1     (s > 1; 1 for s <= 1)

The returned attention scale is sqrt(1/t): RoPE multiplies its cos/sin tables by it, so
queries and keys each carry one factor and the logits are scaled by 1/t, at no cost.
Settings: rope_factor (s), rope_original_max_position (L), rope_beta_fast (32), rope_beta_slow (1).
"""
import math

from .ntk_by_parts import NTKByPartsSettings, ntk_by_parts


class YarnSettings(NTKByPartsSettings):
    pass


def yarn_attention_scale(factor):
    """sqrt(1/t) = 0.1 ln(s) + 1, the per-side factor on queries and keys."""
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def yarn(inv_freq, s: YarnSettings, *, base, seq_len=0):
    inv, _ = ntk_by_parts(inv_freq, s, base=base)
    return inv, yarn_attention_scale(s.rope_factor)
