"""YaRN (Peng, Quesnelle, Fan & Shippole 2023, "YaRN: Efficient Context Window Extension of
Large Language Models", https://arxiv.org/abs/2309.00071, section 3.4).

NTK-by-parts frequencies (ntk_by_parts.py) plus an attention temperature t:

    softmax(q.k / (t sqrt(D))),   sqrt(1 / t) = 0.1 ln(s) + 1     (s > 1; 1 for s <= 1)

The returned attention scale is the per-side factor m = sqrt(1/t) (RoPE's cos/sin tables carry it,
so the logits scale by m^2 = 1/t), as HF's `attention_factor`; chosen as in `_compute_yarn_parameters`:

    rope_attention_factor > 0                m = rope_attention_factor (as given)
    rope_mscale and rope_mscale_all_dim      m = g(s, mscale) / g(s, mscale_all_dim)   (DeepSeek-V2/V3)
    otherwise                                m = g(s, 1)
    g(s, c) = 0.1 c ln(s) + 1 for s > 1, else 1           (0 means unset for the three settings)
"""
import math
from dataclasses import dataclass

from ..base import setting
from .ntk_by_parts import NTKByPartsSettings, ntk_by_parts


@dataclass
class YarnSettings(NTKByPartsSettings):
    rope_attention_factor: float = setting(0.0, at_least=0)   # > 0: the per-side scale of q and k, as given; 0: from s
    rope_mscale: float = setting(0.0, at_least=0)   # with rope_mscale_all_dim: m = g(s, mscale) / g(s, mscale_all_dim)
    rope_mscale_all_dim: float = setting(0.0, at_least=0)


def get_mscale(factor, mscale=1.0):
    """g(s, c) = 0.1 c ln(s) + 1 (s > 1), else 1: the paper's sqrt(1/t) when c = 1."""
    return 0.1 * mscale * math.log(factor) + 1.0 if factor > 1 else 1.0


def yarn(inv_freq, s: YarnSettings, *, base: float, seq_len: int = 0):
    """inv_freq: (D/2,) float64 -> (inv_freq', m), m the factor on queries and keys each."""
    inv, _ = ntk_by_parts(inv_freq, s, base=base, seq_len=seq_len)
    if s.rope_attention_factor > 0:
        return inv, float(s.rope_attention_factor)
    if s.rope_mscale and s.rope_mscale_all_dim:
        return inv, get_mscale(s.rope_factor, s.rope_mscale) / get_mscale(s.rope_factor, s.rope_mscale_all_dim)
    return inv, get_mscale(s.rope_factor)
