"""ALiBi: attention with linear biases (Press, Smith & Lewis 2022, "Train Short, Test
Long", https://arxiv.org/abs/2108.12409).

No embedding; each head h adds a fixed penalty proportional to the distance:

    score(i, j) += -m_h * (i - j)        for keys j <= i

The slopes m_h form a geometric sequence starting at 2^(-8/n) with that same ratio,
for n heads a power of two. For other head counts the paper takes the slopes of the
closest smaller power of two p, then every other slope of the 2p sequence until there
are n slopes.
"""
import math

import torch

from .base import PositionalEncoding


def alibi_slopes(n_head: int) -> torch.Tensor:
    """(n_head,) head slopes of the ALiBi paper: 2^(-8i/p), i = 1..p, then 2^(-8i/2p) for odd i."""
    p = 2 ** math.floor(math.log2(n_head))
    slopes = [2.0 ** (-8.0 * i / p) for i in range(1, p + 1)]
    slopes += [2.0 ** (-8.0 * i / (2 * p)) for i in range(1, 2 * (n_head - p), 2)]
    return torch.tensor(slopes, dtype=torch.float32)


class ALiBi(PositionalEncoding):
    name = "alibi"
    relative_bias = True

    def __init__(self, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.register_buffer("slopes", alibi_slopes(n_head), persistent=False)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_head)

    def score_bias(self, h, q, k):
        return -self.slopes[h] * (q - k).to(self.slopes.dtype)          # -m_h (i - j)
