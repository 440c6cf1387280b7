"""ReRoPE and Leaky ReRoPE (Su Jianlin 2023, "Rectified Rotary Position Embeddings",
https://github.com/bojone/rerope and https://kexue.fm/archives/9708).

Relative positions are used exactly inside a window w and capped (ReRoPE) or slowed
down (Leaky ReRoPE, by 1/k) past it, so no query ever sees a relative position much
larger than in training:

    rel(i, j) = i - j                        if i - j < w
              = w                            ReRoPE,        if i - j >= w
              = w + (i - j - w) / k          Leaky ReRoPE,  if i - j >= w

A capped relative position is not a rotation of q and k separately, so the scores are
built twice and merged (logits, in attend):

    s1 = R(i) q . R(j) k                                 exact part
    s2 = R(w) q . k                                      ReRoPE: every far key at distance w
    s2 = R(i/k + w(1 - 1/k)) q . R(j/k) k                Leaky: distance w + (i - j - w)/k
    logits = where(i - j < w, s1, s2) / sqrt(D)

Two score matrices and no fused kernel; keys are cached un-rotated. Inside the window it is
plain RoPE exactly, so a RoPE model's weights load unchanged (rope_scaling=rerope or leaky_rerope).
Settings: rerope_window (w; 0: half the training length, as Su's w = 256 for 512), rerope_leak
(k, Leaky only; 32 keeps a distance of 16 L at w + 15.5 L / 32 < L for w = L / 2).
"""
import math
from dataclasses import dataclass

import torch

from .base import OwnLogits, setting
from .rope import RoPE, RoPESettings


@dataclass
class ReRoPESettings(RoPESettings):
    rerope_window: int = setting(0, at_least=0, why="0: half the training length")   # w; 0: block_size // 2


@dataclass
class LeakyReRoPESettings(ReRoPESettings):
    rerope_leak: float = setting(32.0, above=1)   # k: past w, distances grow by 1/k per token


class ReRoPE(OwnLogits, RoPE):
    name = "rerope"
    Settings = ReRoPESettings

    def __init__(self, head_dim, rotary_fraction=1.0, base=10000.0, window=1, leak=None):
        super().__init__(head_dim, rotary_fraction, base)
        self.window, self.leak = window, leak

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_embd // cfg.n_head, s.rotary_fraction, s.rope_base,
                   s.rerope_window or max(1, cfg.block_size // 2), getattr(s, "rerope_leak", None))

    def method_label(self):
        return f"{self.name} w{self.window}" + (f" k{self.leak:g}" if self.leak else "")

    def rotate(self, x, ctx, key=False):
        return x   # keys cached raw, rotated twice inside logits()

    def logits(self, q, k, ctx, layer):
        """q, k: (B, H, Tq, D), (B, H, Tk, D) un-rotated, rotated here at any (fractional) positions."""
        q_pos, k_pos, w, leak = ctx.q_pos, ctx.k_pos, self.window, self.leak
        exact = self.rotate_at(q, q_pos) @ self.rotate_at(k, k_pos).transpose(-1, -2)        # (B, H, Tq, Tk)
        if leak is None:  # every far key sits at distance w: rotate q by w, leave k alone
            far = self.rotate_at(q, torch.full_like(q_pos, w, dtype=torch.float64)) @ k.transpose(-1, -2)
        else:
            qp = q_pos.to(torch.float64) / leak + w * (1 - 1 / leak)
            far = self.rotate_at(q, qp) @ self.rotate_at(k, k_pos.to(torch.float64) / leak).transpose(-1, -2)
        near = (q_pos[:, None] - k_pos[None, :]) < w                                         # (Tq, Tk)
        return torch.where(near, exact, far) / math.sqrt(q.shape[-1])


class LeakyReRoPE(ReRoPE):
    name = "leaky_rerope"
    Settings = LeakyReRoPESettings
