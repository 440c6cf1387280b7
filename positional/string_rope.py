"""STRING, ShifTed Rotary position embeddING (An et al. 2024, "Why Does the Effective Context Length of LLMs
Fall Short?", https://arxiv.org/abs/2410.18745; the authors' code: github.com/HKUNLP/STRING).

Pretraining sees small relative positions far more often than large ones (a left-skewed position frequency),
so the largest ones are poorly trained. At evaluation STRING drops them: every relative position of S or
more (S, the shifted offset) is moved down by S - W, onto the well-trained ones, while the W nearest keys
keep their small positions (locality):

    rel(i, j) = i - j              if i - j <  S
              = i - j - S + W      if i - j >= S       (0 < W < S)

so the largest relative position at length T is T - 1 - S + W, and distances W .. S - 1 occur twice (near
the diagonal and shifted). Followed here: the paper's shifted relative-position matrix (its section 4), with
the defaults of the authors' README, S = int(0.33 L) and W = 128 at L = 2048 (here W = L / 16, 128 there,
so that W < S at small L). As in the authors' flash-attention form, a shifted distance is the query moved
to i - S + W against the key at j, so the scores are built twice and merged (as ReRoPE, rerope.py):

    s1 = R(i) q . R(j) k,    s2 = R(i - S + W) q . R(j) k,    logits = where(i - j < S, s1, s2) / sqrt(D)

Keys are cached un-rotated; below S it is plain RoPE exactly, so a RoPE model's weights load unchanged
(rope_scaling=string). Settings: string_offset (S; 0: int(0.33 L)), string_window (W; 0: max(1, L / 16)),
L = the block size the model was trained at.
"""
import math
from dataclasses import dataclass

import torch

from .base import OwnLogits, distance, setting
from .rope import RoPE, RoPESettings


def offsets(s, block_size):
    """(S, W): string_offset and string_window with 0 resolved from the training length."""
    return s.string_offset or int(0.33 * block_size), s.string_window or max(1, block_size // 16)


@dataclass
class STRINGSettings(RoPESettings):
    string_offset: int = setting(0, at_least=0, why="0: int(0.33 x the training length)")   # S
    string_window: int = setting(0, at_least=0, why="0: the training length / 16")         # W

    def check(self, cfg):
        super().check(cfg)
        S, W = offsets(self, cfg.block_size)
        if not 0 < W < S:
            raise ValueError(f"STRING needs 0 < string_window < string_offset, got W = {W} and S = {S} (block_size "
                             f"{cfg.block_size}); set --string_offset and --string_window")


class STRING(OwnLogits, RoPE):
    name = "string"
    Settings = STRINGSettings

    def __init__(self, head_dim, rotary_fraction=1.0, base=10000.0, offset=2, window=1):
        super().__init__(head_dim, rotary_fraction, base)
        self.offset, self.window = offset, window

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_embd // cfg.n_head, s.rotary_fraction, s.rope_base, *offsets(s, cfg.block_size))

    def method_label(self):
        return f"{self.name} S{self.offset} W{self.window}"

    def rotate(self, x, ctx, key=False):
        return x   # keys cached raw, rotated inside logits()

    def logits(self, q, k, ctx, layer):
        """q, k: (B, H, Tq, D), (B, H, Tk, D) un-rotated -> (B, H, Tq, Tk) logits at the shifted distances."""
        k_rot = self.rotate_at(k, ctx.k_pos).transpose(-1, -2)                           # (B, H, D, Tk)
        exact = self.rotate_at(q, ctx.q_pos) @ k_rot
        shifted = self.rotate_at(q, ctx.q_pos - self.offset + self.window) @ k_rot       # distance i - j - S + W
        near = distance(ctx.q_pos, ctx.k_pos) < self.offset                              # (Tq, Tk)
        return torch.where(near, exact, shifted) / math.sqrt(q.shape[-1])
