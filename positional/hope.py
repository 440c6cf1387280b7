"""HoPE, High-frequency rotary Position Encoding (Chen et al. 2024, "HoPE: A Novel Positional Encoding Without
Long-Term Decay for Enhanced Context Awareness and Extrapolation", https://arxiv.org/abs/2410.21216; ACL 2025).

The paper finds that RoPE's low-frequency pairs, those that do not complete a turn within the training length L
(the "activated" ones, whose cos(theta_j (i - j)) dips and comes back within L, and the slower ones below them),
make the U-shaped attention and limit extrapolation, while the high-frequency pairs carry the positions. HoPE
replaces the low-frequency pairs by position-independent ones and keeps RoPE's high frequencies:

    turns_j = L theta_j / (2 pi)                          (turns of pair j within L; theta_j = base^(-2j/d))
    theta'_j = theta_j    if turns_j >= hope_turns          (default 1: at least one full turn within L)
             = 0          otherwise                         (the pair passes unrotated: a content channel)

The position-free pairs are kept, not dropped: q_j k_j + q_{j+d/2} k_{j+d/2} over them is a plain content
score, the same at every distance. p_rope zeroes frequencies the same way but keeps a fixed share of them;
HoPE's cut is set by the training length: L = hope_length (0: the training length, kept when a model goes on
training longer, positional.pin_lengths), so which pairs are frozen is fixed once trained. The cut is made on
RoPE's own frequencies, before any rope_scaling method; the zeroing applies to the angles after it.
What was followed: the rule of the paper's abstract and method summary (keep only the high-frequency components,
those whose period fits within L; the others made position-independent). TODO: check the threshold against the
paper's section 5 (not at hand when this was written); hope_turns moves it.
"""
import math
from dataclasses import dataclass

import torch

from .base import setting
from .rope import RoPE, RoPESettings, rope_inv_freq


@dataclass
class HoPESettings(RoPESettings):
    hope_length: int = setting(0, at_least=0, length=True, why="0: the training length")   # L of the cut
    hope_turns: float = setting(1.0, above=0)   # a pair keeps rotating if it turns at least this often within L


def rotating_pairs(inv_freq, length, turns=1.0):
    """(d/2,) bool: the pairs that make at least `turns` turns within `length` positions."""
    return length * inv_freq / (2 * math.pi) >= turns


class HoPE(RoPE):
    name = "hope"
    Settings = HoPESettings

    def __init__(self, head_dim, rotary_fraction=1.0, base=10000.0, length=1024, turns=1.0, scaling=None):
        super().__init__(head_dim, rotary_fraction, base, scaling)
        plain, _ = rope_inv_freq(self.rotary_dim, base)
        keep = rotating_pairs(plain, length, turns).to(torch.float64)                # (r/2,) 1 = rotating pair
        self.register_buffer("keep", keep, persistent=False)

    @classmethod
    def from_config(cls, cfg, s, scaling=None):
        return cls(cfg.n_embd // cfg.n_head, s.rotary_fraction, s.rope_base, s.hope_length or cfg.block_size,
                   s.hope_turns, scaling)

    def angles(self, positions, inv_freq):
        """(T, r/2) float64 angles m * theta_j, zero for the position-free (low-frequency) pairs."""
        return super().angles(positions, inv_freq) * self.keep
