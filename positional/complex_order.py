"""Complex-order embeddings (Wang, Zhao, Lioma, Li, Zhang & Simonsen, ICLR 2020, "Encoding word
order in complex embeddings", arXiv:1912.12333). Word j at position k is a complex vector

    f(j, k) = r_j e^{i (ω_j k + θ_j)}        r_j amplitude, ω_j frequency, θ_j initial phase  (C/2,)

whose real and imaginary parts, concatenated, are the real-valued input of the first layer:
[r cos(ω k + θ), r sin(ω k + θ)] (C,). It replaces the token embedding. What differs from the paper:
the Transformer after it is real-valued (the paper's is complex, which this GPT is not: its real
form is the concatenation, as the paper's own real-valued baseline), and the per-word r_j, ω_j, θ_j
are linear maps of the word's embedding (r_j = A x_j, ω_j = W x_j, θ_j = V x_j: per word, since x_j
is the word's row of wte, which stays tied to the output head) rather than three vocab tables.
"""
from dataclasses import dataclass

import torch
from torch import nn

from .base import PositionalEncoding, Settings


@dataclass
class ComplexOrderSettings(Settings):
    def check(self, cfg):
        if cfg.n_embd % 2:
            raise ValueError(f"complex_order needs an even n_embd (real and imaginary halves), got {cfg.n_embd}")


class ComplexOrder(PositionalEncoding):
    name = "complex_order"
    Settings = ComplexOrderSettings

    def __init__(self, n_embd: int):
        super().__init__()
        self.amplitude, self.frequency, self.phase = (nn.Linear(n_embd, n_embd // 2, bias=False) for _ in range(3))
        nn.init.normal_(self.amplitude.weight, std=n_embd ** -0.5)
        nn.init.normal_(self.frequency.weight, std=0.02)      # ω ~ 0.02 * sqrt(C) |x|: slow waves at first
        nn.init.normal_(self.phase.weight, std=1.0)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_embd)

    def embed(self, x, ctx):
        angle = self.frequency(x) * ctx.q_pos.to(x.dtype)[:, None] + self.phase(x)   # (B, T, C/2) ω k + θ
        r = self.amplitude(x)
        return torch.cat([r * torch.cos(angle), r * torch.sin(angle)], -1)          # (B, T, C)
