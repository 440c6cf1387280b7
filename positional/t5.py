"""T5 relative position buckets (Raffel et al. 2020, "Exploring the Limits of Transfer
Learning with a Unified Text-to-Text Transformer", https://arxiv.org/abs/1910.10683).

A learned scalar per (bucket, head) is added to the attention logits:

    score(i, j) += table[bucket(j - i), h]

Buckets: the first half of them hold the exact distances 0 .. nb/2 - 1; the rest are
spaced logarithmically up to max_distance, past which every distance shares the last
bucket. Causal (one-sided) buckets here, since a decoder never sees j > i. As in T5,
one table is shared by all layers (it is computed once per forward pass).
"""
import math
from dataclasses import dataclass

import torch
from torch import nn

from .base import PositionalEncoding, Settings, setting


def relative_position_bucket(relative_position, num_buckets=32, max_distance=128):
    """Causal bucket index of each relative_position = key_position - query_position (future keys: bucket 0)."""
    n = torch.as_tensor(relative_position).neg().clamp(min=0)        # distance looking back
    max_exact = num_buckets // 2
    # log-spaced buckets between max_exact and max_distance
    log_ratio = torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return torch.where(n < max_exact, n, large)


@dataclass
class T5Settings(Settings):
    t5_num_buckets: int = setting(32, at_least=2)      # bias values per head: half exact distances, half log-spaced
    t5_max_distance: int = setting(128, at_least=1)    # distances past this share the last bucket


class T5Bias(PositionalEncoding):
    name = "t5"
    relative_bias = True
    Settings = T5Settings

    def __init__(self, n_head: int, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.n_head, self.num_buckets, self.max_distance = n_head, num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, n_head)   # (buckets, H)
        nn.init.zeros_(self.table.weight)                # start as NoPE; training shapes it

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_head, s.t5_num_buckets, s.t5_max_distance)

    def score_bias(self, h, q, k):
        """The bucket function takes j - i, as in the paper and HF (future keys share bucket 0). Several
        queries: buckets once per distance 0 .. max(i - j), read at each pair (no log per pair);
        one query (a decode step, a score_mod's scalars): at each pair, nothing read back to the host."""
        d = (q - k).clamp(min=0)
        if q.numel() > 1 and d.numel() > (n := int(d.max()) + 1):
            return self.table.weight.T[h, self.bucket(torch.arange(n, device=d.device))[d]]
        return self.table.weight[self.bucket(d), h]   # one read of the leaf (FlexAttention's backward on CUDA)

    def bucket(self, d):
        return relative_position_bucket(-d, self.num_buckets, self.max_distance)
