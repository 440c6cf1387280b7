"""xPos: RoPE with an exponential decay (Sun et al. 2022, "A Length-Extrapolatable
Transformer", https://arxiv.org/abs/2212.10554).

On top of the RoPE rotation, channel pair j of a query at position m is scaled by
zeta_j^(m / gamma) and of a key at position n by zeta_j^(-n / gamma), so their product
decays as zeta_j^((m - n) / gamma) with the distance:

    zeta_j = (2j / d + 0.4) / 1.4      (in (0.29, 1), low frequencies decay least)
    gamma  = xpos_scale_base (512 in the paper)

Positions are not re-centred (that would break the KV cache). Key scales grow as 3.5^(n / gamma):
max_positions keeps them below MAX_SCALE (1e30), 28,231 positions at gamma = 512.
"""
import math
from dataclasses import dataclass

import torch

from .base import setting
from .rope import RoPE, RoPESettings


def xpos_scale(positions, head_dim: int, scale_base: float = 512.0) -> torch.Tensor:
    """(len(positions), head_dim // 2) query scales zeta_j^(m / scale_base); keys use 1/scale."""
    pos = torch.as_tensor(positions).to(torch.float64)[:, None]
    zeta = (torch.arange(0, head_dim, 2, dtype=torch.float64, device=pos.device) / head_dim + 0.4) / 1.4
    return (zeta ** (pos / scale_base)).float()


MAX_SCALE = 1e30


@dataclass
class XPosSettings(RoPESettings):
    xpos_scale_base: float = setting(512.0, above=0)   # gamma: the decay zeta_j^(distance / gamma)


class XPos(RoPE):
    name = "xpos"
    Settings = XPosSettings

    def __init__(self, head_dim, rotary_fraction=1.0, base=10000.0, scale_base=512.0, scaling=None):
        super().__init__(head_dim, rotary_fraction, base, scaling)
        self.scale_base = scale_base
        # positions 0..n-1 keep every key scale zeta_j^(-n / gamma) <= MAX_SCALE (float32 stays finite)
        self.max_positions = int(scale_base * math.log(MAX_SCALE) / math.log(1.4 / 0.4))

    @classmethod
    def from_config(cls, cfg, s, scaling=None):
        return cls(cfg.n_embd // cfg.n_head, s.rotary_fraction, s.rope_base, s.xpos_scale_base, scaling)

    def tables(self, pos, key, ctx):
        cos, sin = super().tables(pos, key, ctx)
        s = xpos_scale(pos, self.rotary_dim, self.scale_base)                   # (T, r/2)
        s = 1.0 / s if key else s
        return cos * s, sin * s
