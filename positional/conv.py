"""Convolutional (implicit) positions: a causal depthwise convolution over the token embeddings
before the first layer, so that a model with no other position signal (NoPE) gets a relative one.
Islam, Jia & Bruce (ICLR 2020, "How much position information do convolutional neural networks
encode?", arXiv:2001.08248) show that a convolution leaks position through its zero padding.

    y_t = sum_{j=0..k-1} w_j * x_{t-j}        w: (k, C), one kernel per channel (depthwise)

with x_{t-j} = 0 before the sequence (or the document) starts. w_0 starts at 1 and the other
taps at 0 (identity). With a KV cache the last k-1 embeddings (and document ids) are kept in the
cache, in the order they came (the tokens before, not the positions before: explicit positions may skip).
"""
from dataclasses import dataclass

import torch
from torch import nn

from .base import PositionalEncoding, Settings, setting


@dataclass
class ConvSettings(Settings):
    conv_kernel: int = setting(4, at_least=2, why="1 is no convolution")   # k: taps (this token and k-1 before it)


class Conv(PositionalEncoding):
    name = "conv"
    Settings = ConvSettings

    def __init__(self, n_embd: int, kernel: int = 4):
        super().__init__()
        self.kernel = kernel
        self.w = nn.Parameter(torch.zeros(kernel, n_embd))   # (k, C): w_j for the token j steps back
        with torch.no_grad():
            self.w[0] = 1.0

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_embd, s.conv_kernel)

    def embed(self, x, ctx):
        k, T, doc = self.kernel, x.shape[1], ctx.doc
        past_doc = None if doc is None else doc.new_full((k - 1,), -1)            # no document before the start
        if ctx.cache is not None:  # the k-1 embeddings (and document ids) before this call, kept in order
            ring = ctx.cache.state(self, "ring", lambda: x.new_zeros(x.shape[0], k - 1, x.shape[2]))   # 0: no token
            full = torch.cat([ring, x], 1)                                          # (B, k-1+T, C)
            ring.copy_(full[:, -(k - 1):].detach())
            if doc is not None:
                ring_doc = ctx.cache.state(self, "ring_doc", lambda: doc.new_full((k - 1,), -1))
                past_doc = ring_doc.clone()
                ring_doc.copy_(torch.cat([past_doc, doc])[-(k - 1):])
        else:
            full = torch.cat([x.new_zeros(x.shape[0], k - 1, x.shape[2]), x], 1)
        docs = None if doc is None else torch.cat([past_doc, doc])                 # (k-1+T,)
        y = 0
        for j in range(k):  # tap j: the token j steps back, zero across a document start
            tap = full[:, k - 1 - j:k - 1 - j + T] * self.w[j]
            if docs is not None and j:
                tap = tap * (docs[k - 1 - j:k - 1 - j + T] == doc)[:, None].to(x.dtype)
            y = y + tap
        return y
