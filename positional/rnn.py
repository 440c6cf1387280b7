"""Recurrent positions: a GRU over the token embeddings before the first layer (the survey's
"recursive" absolute positions: a recurrence can count, so the Transformer after it needs no
other position encoding; as in R-Transformer, Wang et al. 2019, and Neishi & Yoshinaga 2019,
"On the Relation between Position Information and Sentence Length in NMT").

    h_t = GRU(x_t, h_{t-1}),  h_{-1} = 0        (Cho et al. 2014: r, z gates; n the candidate)
    r = σ(W_r x + U_r h + b_r),  z = σ(W_z x + U_z h + b_z),  n = tanh(W_n x + b_n + r ⊙ (U_n h + c_n))
    h_t = (1 - z) ⊙ n + z ⊙ h_{t-1};     the layer's input: x_t + h_t (residual, so tokens stay readable)

The cell is written out rather than nn.GRU, so the same code runs in a compiled decode step. The
cache keeps h at the last position; with document ids h restarts at 0 at each document.
"""
import torch
from torch import nn

from .base import PositionalEncoding


class RNN(PositionalEncoding):
    name = "rnn"

    def __init__(self, n_embd: int):
        super().__init__()
        self.wx = nn.Linear(n_embd, 3 * n_embd)   # W_r, W_z, W_n and b_r, b_z, b_n
        self.wh = nn.Linear(n_embd, 3 * n_embd)   # U_r, U_z, U_n and their biases (c_n the last)
        for m in (self.wx, self.wh):
            nn.init.normal_(m.weight, std=n_embd ** -0.5)
            nn.init.zeros_(m.bias)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_embd)

    def embed(self, x, ctx):
        B, T, C = x.shape
        state = None if ctx.cache is None else ctx.cache.state(self, "h", lambda: x.new_zeros(B, C))
        h = x.new_zeros(B, C) if state is None else state
        doc, last = ctx.doc, None
        if state is not None and doc is not None:   # the document of the cache's last token (-1: none yet)
            last = ctx.cache.state(self, "doc", lambda: doc.new_full((1,), -1))
        gx = self.wx(x)                                                           # (B, T, 3C)
        out = []
        for t in range(T):
            before = doc[t - 1:t] if doc is not None and t else last
            if before is not None:
                h = h * (doc[t] == before)                                        # a new document: h = 0
            r, z, n = gx[:, t].chunk(3, -1)
            hr, hz, hn = self.wh(h).chunk(3, -1)
            r, z = torch.sigmoid(r + hr), torch.sigmoid(z + hz)
            h = (1 - z) * torch.tanh(n + r * hn) + z * h
            out.append(h)
        if state is not None:
            state.copy_(h.detach())
        if last is not None:
            last.copy_(doc[-1:])
        return x + torch.stack(out, 1)                                            # (B, T, C)
