"""Multiplicative absolute positions: the token embedding times a position vector, element-wise,

    x_k -> x_k * p_k          (instead of GPT-2's x_k + p_k),   p: (block_size, C) learned

(the multiplicative form of absolute position in the survey of position encodings). p starts at 1
plus GPT-2's N(0, 0.02) noise: the model starts NoPE-like and learns a per-position gain of each
channel. A learned table: positions past block_size are refused (max_positions), as for `learned`.
"""
import torch
from torch import nn

from .base import PositionalEncoding


class Multiplicative(PositionalEncoding):
    name = "multiplicative"

    def __init__(self, n_positions: int, n_embd: int):
        super().__init__()
        self.max_positions = n_positions
        self.p = nn.Parameter(1 + 0.02 * torch.randn(n_positions, n_embd))   # (n, C), p ~ 1

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.max_position or cfg.block_size, cfg.n_embd)

    def embed(self, x, ctx):
        return x * self.p[ctx.q_pos]  # (B, T, C) * (T, C)
