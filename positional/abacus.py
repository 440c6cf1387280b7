"""Abacus embeddings (McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings",
https://arxiv.org/abs/2405.17399; NeurIPS 2024): every digit gets a learned embedding of its offset within
its number, so that digits of equal significance share one, added to the token embedding:

    x_t = wte[token_t] + A[o_t + k [o_t > 0]],   o_t = 1, 2, ... within a number, 0 for a non-digit token
    k ~ U{0, ..., abacus_shift - 1} once per training forward (0 at evaluation): the paper's K = 100

The paper's numbers are written least significant digit first and o counts from the number's first digit, so
o = 1 + the digit's significance; its reference code (github.com/mcleish7/arithmetic, abacus.py) counts runs of
digit tokens and draws one k per forward pass (randint(0, 99), inclusive: 100 shifts), as here. Longer numbers
than the training ones meet rows that the shifts trained: up to (training digits) + abacus_shift - 1.

The offsets come from the task (ctx.places, (B, T): tasks/addition.py's places(), 1 + the bit's significance,
0 elsewhere), not from the token ids, so the encoding knows no vocabulary. Without places (a text dataset,
model.generate) every token takes row 0: the attention is NoPE's, as it is always (the mask follows token
order, not the places). The table is initialised at the token embedding's std (embed_std; the reference code
keeps nn.Embedding's N(0, 1)), so that offsets and tokens start on an equal footing.
"""
from dataclasses import dataclass

import torch
from torch import nn

from .base import PositionalEncoding, Settings, setting


@dataclass
class AbacusSettings(Settings):
    abacus_rows: int = setting(256, at_least=2, why="row 0 for non-digits, then one row an offset")
    abacus_shift: int = setting(100, at_least=1, why="1: no shift in training")   # K: k in [0, K)


def offset_rows(places, shift):
    """(B, T) rows of A: the offsets shifted by `shift` (an int or (B, 1)) where they are digits' (> 0), row 0
    elsewhere."""
    return torch.where(places > 0, places + shift, 0)


def check_rows(top, rows, name, key):
    """One line of ValueError unless row `top` is in a table of `rows` rows."""
    if top >= rows:
        raise ValueError(f"{name} has {rows} rows and this forward needs row {top} (a longer number, or the "
                         f"training shift); raise --{key} above {top}")


def placed(ctx, x):
    """ctx.places as a (B, T) LongTensor on x's device (checked), or None where the forward has none."""
    B, T = x.shape[:2]
    if ctx.places is None:
        return None
    if ctx.places.shape != (B, T) or ctx.places.is_floating_point():
        raise ValueError(f"places must be a (B, T) = ({B}, {T}) integer tensor, got {tuple(ctx.places.shape)}")
    return ctx.places.to(x.device)


class Abacus(PositionalEncoding):
    name = "abacus"
    Settings = AbacusSettings
    excluded_param_names = ("pe.table.weight",)   # a position table, left out like GPT-2's wpe
    reads_places = True

    def __init__(self, n_embd, rows=256, shift=100, std=0.02):
        super().__init__()
        self.rows, self.shift = rows, shift
        self.table = nn.Embedding(rows, n_embd)
        nn.init.normal_(self.table.weight, mean=0.0, std=std)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_embd, s.abacus_rows, s.abacus_shift, cfg.embed_std)

    def embed(self, x, ctx):
        places = placed(ctx, x)
        if places is None:                     # no host work: a static decoding step compiles whole
            return x + self.table.weight[0]
        k = int(torch.randint(self.shift, ())) if self.training else 0   # one shift a forward (reference code)
        top = int(places.max())                                            # the longest number's last offset
        check_rows(top + k if top else 0, self.rows, self.name, "abacus_rows")
        return x + self.table(offset_rows(places, k))                      # (B, T, C) + (B, T, C)
