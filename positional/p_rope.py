"""p-RoPE: RoPE with its lowest frequencies removed (Barbero et al. 2025, "Round and Round
We Go! What makes Rotary Positional Encodings useful?", https://arxiv.org/abs/2410.06205).

The frequencies are RoPE's over the *whole* head, and only the highest fraction p of them
is kept; the others are set to zero, so their channel pairs never turn and carry no
position (they act as NoPE channels, free to carry semantic content):

    theta_i = base^(-2i / D)            if i <  round(p * D/2)
            = 0                         otherwise,            i = 0 .. D/2 - 1

p = 1 is RoPE, p = 0 is NoPE. Not `rope` with rotary_fraction = p, which recomputes the frequencies
over the rotated width and pairs other channels. The zeroing applies to the angles, after any
rope_scaling method.
"""
from dataclasses import dataclass

import torch

from .base import Settings, setting
from .rope import RoPE


@dataclass
class PRoPESettings(Settings):
    rope_base: float = setting(10000.0, above=1)   # theta_i = base^(-2i/D)
    p_rope_fraction: float = 0.75   # p: share of RoPE's frequencies kept (the highest ones)

    def check(self, cfg):
        super().check(cfg)
        if (cfg.n_embd // cfg.n_head) % 2:
            raise ValueError(f"p_rope needs an even head dim, got {cfg.n_embd // cfg.n_head}; change n_embd/n_head")
        if not 0 <= self.p_rope_fraction <= 1:
            raise ValueError(f"p_rope_fraction must be in [0, 1] (1: RoPE, 0: NoPE), got {self.p_rope_fraction}")


class PRoPE(RoPE):
    name = "p_rope"
    Settings = PRoPESettings

    def __init__(self, head_dim, fraction=0.75, base=10000.0, scaling=None):
        super().__init__(head_dim, 1.0, base, scaling)
        self.n_kept = int(round(fraction * head_dim / 2))
        keep = (torch.arange(head_dim // 2) < self.n_kept).to(torch.float64)     # (D/2,) 1 = rotating pair
        self.register_buffer("keep", keep, persistent=False)

    @classmethod
    def from_config(cls, cfg, s, scaling=None):
        return cls(cfg.n_embd // cfg.n_head, s.p_rope_fraction, s.rope_base, scaling)

    def angles(self, positions, inv_freq):
        """(T, D/2) float64 angles m * theta_i, zero for the removed frequencies."""
        return super().angles(positions, inv_freq) * self.keep
