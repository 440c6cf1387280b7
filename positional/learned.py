"""Learned absolute position embeddings, as in GPT-2 (Radford et al. 2019).

    x_t = wte[token_t] + wpe[t],   wpe: (block_size, C) trained like any other weight

The table only knows positions 0 .. block_size-1: max_positions = block_size.
"""
import torch
from torch import nn

from .base import PositionalEncoding


class Learned(PositionalEncoding):
    name = "learned"
    excluded_param_names = ("pe.wpe.weight",)  # nanoGPT's get_num_params leaves wpe out

    def __init__(self, n_positions: int, n_embd: int):
        super().__init__()
        self.max_positions, self.n_embd = n_positions, n_embd
        self.wpe = nn.Embedding(n_positions, n_embd)
        nn.init.normal_(self.wpe.weight, mean=0.0, std=0.02)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.max_position or cfg.block_size, cfg.n_embd)   # a table for every position trained on

    def embed(self, x, ctx):
        return x + self.wpe(ctx.q_pos)  # (B, T, C) + (T, C)
