"""YaRN (Peng, Quesnelle, Fan & Shippole 2023, "YaRN: Efficient Context Window Extension of
Large Language Models", https://arxiv.org/abs/2309.00071, section 3.4).

NTK-by-parts frequencies (see ntk_by_parts.py) plus an attention temperature t:

    softmax(q.k / (t sqrt(D))),   sqrt(1 / t) = 0.1 ln(s) + 1     (s > 1; 1 for s <= 1)

The returned attention scale is sqrt(1/t): RoPE multiplies its cos/sin tables by it, so
queries and keys each carry one factor and the logits are scaled by 1/t, at no cost.
Knobs: factor (s), original_max_position (L), beta_fast (32), beta_slow (1).
"""
import math

from .ntk_by_parts import ntk_by_parts


def yarn_attention_scale(factor):
    """sqrt(1/t) = 0.1 ln(s) + 1, the per-side factor on queries and keys."""
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def yarn(inv_freq, *, factor, original_max_position, beta_fast=32.0, beta_slow=1.0, **_):
    inv, _ = ntk_by_parts(inv_freq, factor=factor, original_max_position=original_max_position,
                          beta_fast=beta_fast, beta_slow=beta_slow)
    return inv, yarn_attention_scale(factor)
