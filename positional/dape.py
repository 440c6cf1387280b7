"""DAPE: data-adaptive positional encoding (Zheng, Gao, Shi, Huang, Li, Xiong, Ren, Ng, Jiang, Li & Li, NeurIPS 2024,
"DAPE: Data-Adaptive Positional Encoding for Length Extrapolation", https://arxiv.org/abs/2405.14722).

The logits of all heads at one query-key pair are adjusted by a small MLP that reads them together with a fixed
prior bias of all heads (the paper's Eq. 2, QK^T + B + f(QK^T, B), multi-head: f reads A and B concatenated, the
residual form its ablation calls Concat_Residual; as the authors' code, chuanyang-Zheng/DAPE DAPE.py at 51cf9bd):

    A_ij = q_i . k_j / sqrt(D)                               (H,) at pair (i, j): content alone, no positions
    B_ij = b(i - j)                                          (H,) the prior, one of this repo's relative biases:
                                                             Kerple's -r1 log(1 + r2 |i - j|) (the paper's main
                                                             setting, kerple.py) or ALiBi's -m_h (i - j) (alibi.py)
    logits_ij = A_ij + B_ij + f([A_ij; B_ij]),   f(z) = W2 LeakyReLU(W1 z + b1) + b2
                                                 W1 (D_DAPE, 2H), W2 (H, D_DAPE): the paper's two-layer LeakyReLU MLP

then softmax over the keys each query sees. D_DAPE = dape_width, 32 by default (the width of the authors' configs,
chuanyang-Zheng/DAPE configs/125M/512/125M_kerple_c.yml at 5667d28). One MLP per layer, with nn.Linear's initial
weights (as the authors' code); the prior is one module shared by the layers, as this repo's Kerple is (the
authors' code gives each layer its own r1, r2), so that with f = 0 (W2 = 0, b2 = 0) DAPE is the prior's encoding.
f acts on each pair alone: no logit of another pair reaches it, so a query's logits never depend on later tokens.
The pairs a query does not see (future keys, other documents, a cache's empty slots at position 2^30) are set to 0
before f and masked after it: no value of theirs enters f. Relative: A has no positions and B depends on i - j.
Tensor contract as OwnLogits.logits: q (B, H, Tq, D), k (B, H, Tk, D) -> (B, H, Tq, Tk), 1/sqrt(D) included; f
works on PAIRS pairs at a time, (B, D_DAPE, PAIRS), and B is read from one table by distance made once per forward
(long evaluations go by blocks of query rows, attention/long_cpu.py: no tensor past a block's scores).
"""
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .alibi import ALiBi
from .base import OwnLogits, setting
from .kerple import Kerple, KerpleSettings

PRIORS = ("kerple", "alibi")
PAIRS = 8192   # pairs a slice of the MLP's hidden layer: (B, D_DAPE, PAIRS) floats, 1 MiB at B = 1


@dataclass
class DapeSettings(KerpleSettings):   # kerple_variant: the Kerple prior's kernel
    dape_prior: str = setting("kerple", choices=PRIORS)   # the fixed prior B: kerple (the paper's main) or alibi
    dape_width: int = setting(32, at_least=1, why="D_DAPE, the MLP's hidden width")

    def check(self, cfg):
        super().check(cfg)
        if self.dape_prior != "kerple" and self.kerple_variant != "log":
            raise ValueError(f"kerple_variant={self.kerple_variant!r} is the Kerple prior's kernel, and this run's "
                             f"dape_prior is {self.dape_prior!r}; drop --kerple_variant or use --dape_prior=kerple")


class DAPE(OwnLogits):
    name = "dape"
    Settings = DapeSettings

    def __init__(self, n_layer: int, n_head: int, prior: str = "kerple", width: int = 32, variant: str = "log"):
        super().__init__()
        self.n_head = n_head
        self.prior = Kerple(n_head, variant) if prior == "kerple" else ALiBi(n_head)
        self.mlp = nn.ModuleList([nn.Sequential(nn.Linear(2 * n_head, width), nn.LeakyReLU(),
                                                nn.Linear(width, n_head)) for _ in range(n_layer)])

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_head, s.dape_prior, s.dape_width, s.kerple_variant)

    def adapt(self, a, b, layer):
        """f([A; B]) at every pair: a (B, H, Tq, Tk), b (H, Tq, Tk) -> (B, H, Tq, Tk), the heads mixed by pair. The
        hidden layer is D_DAPE / H times the scores' size, so it is formed for PAIRS pairs at a time (a slice of the
        flattened (Tq, Tk) pairs): it stays in the processor's cache, and no tensor is larger than the scores (a long
        evaluation's blocks keep their memory bound)."""
        first, act, second = self.mlp[layer]
        B, H, Tq, Tk = a.shape
        dt, slope = a.dtype, act.negative_slope
        w1, b1 = first.weight.to(dt), first.bias.to(dt)[:, None]              # (D_DAPE, 2H): A's columns, then B's
        w2, b2 = second.weight.to(dt), second.bias.to(dt)[:, None]            # (H, D_DAPE)
        # LeakyReLU(x) = s x + (1 - s) ReLU(x), so f(z) = s W2 W1 z + (s W2 b1 + b2) + (1 - s) W2 ReLU(W1 z + b1):
        # the same f, its linear part by one (H, 2H) product, the hidden layer through ReLU in place (the faster)
        linear, offset, w2_relu = slope * (w2 @ w1), slope * (w2 @ b1) + b2, (1 - slope) * w2
        a, b = a.reshape(B, H, Tq * Tk), b.to(dt).reshape(H, Tq * Tk)         # (B, H, pairs), (H, pairs)
        out = [[] for _ in range(B)]
        starts = range(0, Tq * Tk, PAIRS) if Tq * Tk > PAIRS else [0]   # one slice: a compiled decode step's
        for s in starts:                                                  # guard holds at every cache length
            pairs = slice(s, s + PAIRS)
            for i in range(B):   # one sequence's slice: plain matrix products, the biases added in place
                z = torch.cat([a[i, :, pairs], b[:, pairs]])                    # (2H, pairs): [A; B]
                h = torch.mm(w1, z).add_(b1).relu_()                            # (D_DAPE, pairs)
                out[i].append(torch.mm(linear, z).add_(offset).addmm_(w2_relu, h))   # (H, pairs)
        return torch.stack([torch.cat(parts, -1) for parts in out]).view(B, H, Tq, Tk)

    def logits(self, q, k, ctx, layer):
        a = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))      # (B, H, Tq, Tk)
        hidden = ctx.hidden()                                                 # (Tq, Tk) or (H, Tq, Tk)
        b = self.prior_at(ctx).masked_fill(hidden, 0.0)                       # (H, Tq, Tk), 0 where not seen
        return a + b.to(a.dtype) + self.adapt(a.masked_fill(hidden, 0.0), b, layer)

    def prior_at(self, ctx):
        """B at ctx's pairs, (H, Tq, Tk), read from the prior by distance (both priors are relative: B_ij = b(i - j)),
        a table (H, n_positions) made once per forward for every layer and block of rows; the pairs with a negative
        distance or one past the table (not seen: the future, a cache's empty slots) read distance 0."""
        n = ctx.n_positions
        table = ctx.once((id(self), "prior"), lambda: self.prior_table(n, ctx.q_pos.device))   # (H, n)
        d = (ctx.q_pos[:, None] - ctx.k_pos[None, :]).clamp_(0, n - 1)       # (Tq, Tk)
        return table.index_select(1, d.view(-1)).view(-1, *d.shape)

    def prior_table(self, n, device):
        """(H, n): the prior at distances 0..n-1, by its one-query form (query 0, keys at -d: i - j = d), which reads
        nothing back to the host (Kerple's table by distance would, and a compiled decode step cannot)."""
        heads, distances = torch.arange(self.n_head, device=device)[:, None], torch.arange(n, device=device)[None]
        zero = torch.zeros((), dtype=torch.long, device=device)
        return self.prior.score_bias(heads, zero, -distances)

    def extra_repr(self):
        return f"name={self.name!r}, prior={self.prior.name!r}, width={self.mlp[0][0].out_features}"
