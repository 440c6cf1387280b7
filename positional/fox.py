"""FoX, the Forgetting Transformer (Lin, Nikishin, He & Courville 2025, "Forgetting
Transformer: Softmax Attention with a Forget Gate", https://arxiv.org/abs/2503.02130).

No position signal of its own (NoPE): each head h of each layer reads a scalar forget
gate from the layer's input x_t (B, T, C) and the logits decay by the gates in between:

    f_t  = sigmoid(w_h . x_t + b_h)                          (per layer, per head)
    c_t  = sum_{l <= t} log f_l                              (cumulative, <= 0, decreasing)
    logit(i, j) = q_i . k_j / sqrt(D) + sum_{l=j+1..i} log f_l  =  q_i . k_j / sqrt(D) + c_i - c_j

A data-dependent ALiBi: with f_t = exp(-m) everywhere it is ALiBi with slope m, which is
how the gates start here (b_h = log(e^-m_h / (1 - e^-m_h)) for ALiBi's slopes m_h,
w ~ N(0, 0.02); our choice of initialisation, not the paper's). The scores depend on
content, never on absolute positions. The gates read the layer input (read_input); with documents
the sums start over at each one. The cache keeps c by slot, as it keeps the keys ((B, H, slots) per
layer), and the last token's.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F

from .alibi import alibi_slopes
from .base import OwnLogits


class FoX(OwnLogits):
    name = "fox"

    def __init__(self, n_layer: int, n_head: int, n_embd: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_layer, n_head, n_embd) * 0.02)     # w: (L, H, C)
        m = alibi_slopes(n_head).double()
        self.bias = nn.Parameter((-m - torch.log1p(-torch.exp(-m))).float().repeat(n_layer, 1))  # b: (L, H)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_head, cfg.n_embd)

    def sums_of(self, x, ctx, layer):
        """(c, c_k): the cumulative log gates of the queries (B, H, T) and of the keys (B, H, Tk)."""
        w, b = self.weight[layer], self.bias[layer]
        if torch.is_autocast_enabled(x.device.type):   # gates and their sums in float32
            with torch.autocast(x.device.type, enabled=False):
                logit = F.linear(x.float(), w, b)                                       # (B, T, H)
        else:   # (a decode step pays for the context and for a call on float32)
            logit = F.linear(x if x.dtype == torch.float32 else x.float(), w, b)
        log_f = F.logsigmoid(logit).transpose(1, 2)                                   # (B, H, T)
        if ctx.doc is None:
            c = log_f if log_f.shape[-1] == 1 else log_f.cumsum(-1)
        else:  # the sums start over at each document: its logits do not depend on the documents before it
            counts = torch.unique_consecutive(ctx.doc, return_counts=True)[1].tolist()
            c = torch.cat([part.cumsum(-1) for part in log_f.split(counts, -1)], -1)
        c_k, cache = c, ctx.cache
        if cache is not None:
            last = cache.state(self, f"last{layer}", lambda: c.new_zeros(*c.shape[:2], 1))   # c of the last token fed
            sums = cache.state(self, f"sums{layer}", lambda: c.new_zeros(*c.shape[:2], cache.size))  # c by slot, as k
            c = c + last                                                                # continued; 0 at the start
            last.copy_(c[..., -1:].detach())
            sums.index_copy_(-1, cache.slot, c.detach())
            c_k = sums[..., :len(ctx.k_pos)]                       # the attended slots (k_pos: theirs); empty: masked
        return c, c_k

    def read_input(self, x, ctx, layer):
        """The gates' sums of the layer input x, once per forward and layer (every query block shares them)."""
        ctx.once((id(self), layer), lambda: self.sums_of(x, ctx, layer))

    def sums(self, ctx, layer):
        """(c, c_k) read_input made for this forward and layer."""
        return ctx.once((id(self), layer), lambda: missing_input(layer))

    band = 0   # every key in the far field: the banded kernel (attention/long_cpu.py) is SDPA's alone

    def far(self, q, k, v, ctx, layer):
        """c_i - c_j split as a constant per query, c_i - c_a, and one more key channel, c_a - c_j (the queries' 1),
        a = the block's first query, so that the channel stays near the block's logits; in float32."""
        B, H, Tq, D = q.shape
        c, c_k = self.sums(ctx, layer)
        a, Tk = ctx.rows.start or 0, k.shape[2]
        qa = torch.cat([q.float() / math.sqrt(D), q.new_ones(B, H, Tq, 1, dtype=torch.float32)], -1)
        ka = torch.cat([k.float(), (c[..., a:a + 1] - c_k[..., :Tk])[..., None]], -1)        # (B, H, Tk, D + 1)
        return qa, ka, v.float(), c[..., a:a + Tq] - c[..., a:a + 1]

    def one_query(self, q, k, v, ctx, layer):
        """q . k_j / sqrt(D), the decay c_i - c_j a bias over the keys (float32)."""
        c, c_k = self.sums(ctx, layer)
        return q * (1.0 / math.sqrt(q.shape[-1])), k, v, c[..., ctx.rows, None] - c_k[..., None, :k.shape[2]]

    def flex_form(self, q, k, v, ctx, layer):
        """q . k_j / sqrt(D), the decay c_i - c_j read from the sums by query and key index (c_j from a copy of the
        sums where they are the queries': each tensor needing a gradient is read once)."""
        c, c_k = self.sums(ctx, layer)
        c_k = c_k.clone() if c_k is c else c_k

        def decay(b, h, qi, ki, qp, kp):
            return c[b, h, qi] - c_k[b, h, ki]
        return q * (1.0 / math.sqrt(q.shape[-1])), k, v, decay

    def logits(self, q, k, ctx, layer):
        """q . k / sqrt(D) plus the decay c_i - c_j of the gates read_input read."""
        B, H, Tq, D = q.shape
        Tk = k.shape[2]
        c, c_k = self.sums(ctx, layer)
        decay = c[..., ctx.rows, None] - c_k[..., None, :Tk]                           # (B, H, Tq, Tk), float32
        if q.dtype != decay.dtype:  # bfloat16/float16: the decay stays float32, added after the product
            return (q @ k.transpose(-1, -2)) / math.sqrt(D) + decay
        # one GEMM forms q.k / sqrt(D) and adds the decay to it: no separate product and sum
        scores = torch.baddbmm(decay.reshape(B * H, Tq, Tk), q.reshape(B * H, Tq, D),
                               k.reshape(B * H, Tk, D).transpose(1, 2), alpha=1.0 / math.sqrt(D))
        return scores.view(B, H, Tq, Tk)


def missing_input(layer):
    raise RuntimeError(f"FoX's gates of layer {layer} are read from the layer input: call read_input(x, ctx, "
                       f"layer) before its logits")
