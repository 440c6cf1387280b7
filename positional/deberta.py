"""DeBERTa's disentangled attention (He, Liu, Gao & Chen, ICLR 2021, arXiv:2006.03654, eq. 2-4):
content and relative position are separate vectors, and the logit sums three of the four products

    A_ij = q_i·k_j  +  q_i·K^r_{δ(i,j)}  +  k_j·Q^r_{δ(j,i)},    logits = A / sqrt(3 D)
           (c2c)       (c2p)                (p2c)                 (no p2p: T5 keeps only that one)

with P (n, C) relative position embeddings shared by the layers, K^r = P W_{k,r} and Q^r = P W_{q,r}
per layer (split into heads), and δ DeBERTa v2's log buckets of the distance d = i - j:
d itself up to mid = n/2, then mid + ceil(log(d/mid) / log((M-1)/mid) (mid-1)) up to M =
deberta_max_distance (capped at n - 1). Causal: a query sees only d >= 0, so δ(j,i) = -d is fixed
by d and one table indexed by bucket(d) serves both c2p and p2c.
"""
import math
from dataclasses import dataclass

import torch
from torch import nn

from .base import OwnLogits, Settings, distance, setting


@dataclass
class DebertaSettings(Settings):
    deberta_buckets: int = setting(32, at_least=4)   # n: relative position embeddings (half exact distances, half log)
    deberta_max_distance: int = 128   # M: distances from here on share the last bucket

    def check(self, cfg):
        super().check(cfg)
        if self.deberta_max_distance <= self.deberta_buckets // 2 + 1:
            raise ValueError(f"deberta_max_distance must be > deberta_buckets/2 + 1, got {self.deberta_max_distance}")


def log_bucket(d, buckets, max_distance):
    """DeBERTa v2's bucket of distances d >= 0: exact below mid = buckets/2, log-spaced up to max_distance."""
    mid = buckets // 2
    log = torch.ceil(torch.log(d.clamp(min=mid).float() / mid) / math.log((max_distance - 1) / mid) * (mid - 1)) + mid
    return torch.where(d <= mid, d, log.long()).clamp(0, buckets - 1)


class Deberta(OwnLogits):
    name = "deberta"
    Settings = DebertaSettings

    def __init__(self, n_layer, n_embd, n_head, buckets=32, max_distance=128):
        super().__init__()
        self.n_head, self.buckets, self.max_distance = n_head, buckets, max_distance
        d = torch.arange(max_distance + 1)   # band: the first distance of the last bucket (later ones are in it): far()
        self.band = int(d[log_bucket(d, buckets, max_distance) == buckets - 1][0])
        self.rel = nn.Parameter(0.02 * torch.randn(buckets, n_embd))                 # P: (n, C)
        self.w_kr = nn.Parameter(0.02 * torch.randn(n_layer, n_embd, n_embd))      # W_{k,r} per layer
        self.w_qr = nn.Parameter(0.02 * torch.randn(n_layer, n_embd, n_embd))      # W_{q,r}

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_embd, cfg.n_head, s.deberta_buckets, s.deberta_max_distance)

    def heads(self, w):
        """(H, n, D): the projected position embeddings P W, split into heads."""
        return (self.rel @ w).view(self.buckets, self.n_head, -1).transpose(0, 1)

    def projected(self, layer, ctx):
        """(2, H, n, D): K^r and Q^r of `layer`, kept in the cache for a generation (its steps do not project them)."""
        make = lambda: torch.stack([self.heads(self.w_kr[layer]), self.heads(self.w_qr[layer])])   # noqa: E731
        return make() if ctx.cache is None else ctx.cache.state(self, ("heads", layer), lambda: make().detach())

    def far(self, q, k, v, ctx, layer):
        """(q.k + q.K^r[n-1] + k.Q^r[n-1]) / sqrt(3 D): the key's term as one more channel, the query's a constant."""
        B, H, T, D = q.shape
        kr, qr = (self.heads(w[layer])[:, -1].to(q.dtype) for w in (self.w_kr, self.w_qr))    # (H, D) each
        scale = 1.0 / math.sqrt(3 * D)
        qa = torch.cat([q, q.new_ones(B, H, T, 1)], -1) * scale
        ka = torch.cat([k, (k @ qr[:, :, None])], -1)                                       # (B, H, T, D + 1)
        return qa, ka, v, (q @ kr[:, :, None])[..., 0] * scale

    def one_query(self, q, k, v, ctx, layer):
        """q . (k_j + K^r[b_j]) plus the bias k_j . Q^r[b_j], over sqrt(3 D)."""
        b = ctx.once((id(self), "b", ctx.rows.start), lambda: log_bucket(
            distance(ctx.q_pos, ctx.k_pos)[0].clamp(min=0), self.buckets, self.max_distance))   # (Tk,)
        scale = 1.0 / math.sqrt(3 * q.shape[-1])
        rows = ctx.cache.state(self, ("rows", layer), lambda: (self.projected(layer, ctx) * torch.tensor(   # Q^r scaled
            [1.0, scale], device=q.device)[:, None, None, None]).permute(2, 0, 1, 3).flatten(1))
        kr, qr = rows.index_select(0, b).view(len(b), 2, self.n_head, -1).permute(1, 2, 0, 3).to(q.dtype)   # (H, Tk, D)
        return q * scale, k + kr, v, (k * qr).sum(-1)[:, :, None]                        # bias (B, H, 1, Tk)

    def flex_form(self, q, k, v, ctx, layer):
        """c2p and p2c read from q.K^r (B, H, Tq, n) and k.Q^r (B, H, Tk, n) at the bucket of the distance (a table
        by distance up to M, the last bucket's from there), all over sqrt(3 D)."""
        scale = 1.0 / math.sqrt(3 * q.shape[-1])
        kr, qr = self.projected(layer, ctx).to(q.dtype)
        c2p, p2c = (q @ kr.transpose(-1, -2)) * scale, (k @ qr.transpose(-1, -2)) * scale
        M = self.max_distance
        bucket = ctx.once((id(self), "bucket"), lambda: log_bucket(
            torch.arange(M + 1, device=q.device), self.buckets, M))                   # (M + 1,)

        def position(b, h, qi, ki, qp, kp):
            n = bucket[(qp(qi) - kp(ki)).clamp(0, M)]
            return c2p[b, h, qi, n] + p2c[b, h, ki, n]
        return q * scale, k, v, position

    def logits(self, q, k, ctx, layer):
        B, H, Tq, D = q.shape
        Tk = k.shape[2]
        b = log_bucket(distance(ctx.q_pos, ctx.k_pos).clamp(min=0), self.buckets, self.max_distance)   # (Tq, Tk)
        kr, qr = self.projected(layer, ctx).to(q.dtype)
        c2p = (q @ kr.transpose(-1, -2)).gather(-1, b.expand(B, H, Tq, Tk))                      # q_i·K^r[δ]
        p2c = (k @ qr.transpose(-1, -2)).gather(-1, b.T.expand(B, H, Tk, Tq)).transpose(-1, -2)  # k_j·Q^r[δ]
        return (q @ k.transpose(-1, -2) + c2p + p2c) / math.sqrt(3 * D)              # (B, H, Tq, Tk)
