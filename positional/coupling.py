"""Position coupling (Cho et al. 2024, "Position Coupling: Improving Length Generalization of Arithmetic
Transformers Using Task Structure", https://arxiv.org/abs/2405.20671; NeurIPS 2024): the tokens that the task
relates share one position id, read by a learned absolute table; for addition, the digits of equal significance
in both operands and the sum:

    x_t = wte[token_t] + P[p_t],   p_t = s + o_t   (o_t = 1 + a digit's significance, 0 for any other token)
    s ~ U{0, ..., coupling_rows - 1 - max_t o_t} per example in training (0 at evaluation): a random start

so that every row of P up to coupling_rows - 1 is trained and a sum longer than the training ones (up to
coupling_rows - 2 digits) meets trained rows. The attention is NoPE's: the causal mask follows token order,
never these ids, which repeat (a_i, b_i and c_i share one) and are not increasing.

The operators take id s, the column just below the least significant digit's, under the same start: the paper's
reference code (github.com/HanseulJo/position-coupling, src/data/addition.py) gives '+' and '=' the id next to
the least significant digit's. That matters because '=' (here SEP) is the token that predicts the sum's first
digit: at id s it stands to a_0 and b_0 (id s + 1) as every answer digit c_i (s + 1 + i) stands to the next
column's operands, whatever the start. A fixed id 0 for the operators (this file before) leaves SEP nothing that
follows the start, so it cannot find the column it must add. PAD takes id s too (the reference gives no rule for
it); it is never a target. What still differs from the reference: there ids count down from the sum's most
significant digit (start + width - i for significance i); here they count up from the least significant one, so
a token's id depends on the tokens before it alone (no operand width needed).

The task supplies o (ctx.places, (B, T): tasks/addition.py's places()); without places every token takes
row 0 (NoPE), as for abacus.py.
"""
from dataclasses import dataclass

import torch
from torch import nn

from .abacus import check_rows, placed
from .base import PositionalEncoding, Settings, setting


@dataclass
class CouplingSettings(Settings):
    coupling_rows: int = setting(256, at_least=2, why="row 0 for other tokens, then one row an id")


def coupled_ids(places, start):
    """(B, T) rows of P: every token's place moved by its example's start (an int or (B, 1)), the operators' and
    PAD's 0 included (the column below the least significant digit's: the module docstring says why)."""
    return places + start


def random_starts(places, rows, generator=None):
    """(B, 1) starts s, each uniform over the values that keep its row's last id s + max o below `rows`."""
    room = rows - places.max(1, keepdim=True).values                   # (B, 1) s + max o <= rows - 1
    u = torch.rand(room.shape, generator=generator, device=places.device)
    return (u * room).long()


class Coupling(PositionalEncoding):
    name = "coupling"
    Settings = CouplingSettings
    excluded_param_names = ("pe.table.weight",)   # a position table, left out like GPT-2's wpe
    reads_places = True

    def __init__(self, n_embd, rows=256, std=0.02):
        super().__init__()
        self.rows = rows
        self.table = nn.Embedding(rows, n_embd)
        nn.init.normal_(self.table.weight, mean=0.0, std=std)   # at embed_std, as abacus.py says why

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_embd, s.coupling_rows, cfg.embed_std)

    def embed(self, x, ctx):
        places = placed(ctx, x)
        if places is None:                     # every token at row 0, as abacus.py
            return x + self.table.weight[0]
        check_rows(int(places.max()), self.rows, self.name, "coupling_rows")
        start = random_starts(places, self.rows) if self.training else 0
        return x + self.table(coupled_ids(places, start))             # (B, T, C) + (B, T, C)
