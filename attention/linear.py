"""Causal linear attention with rotary positions (Katharopoulos et al. 2020, "Transformers
are RNNs", https://arxiv.org/abs/2006.16236; RoFormer, Su et al. 2021, sec. 3.3,
https://arxiv.org/abs/2104.09864).

Softmax is replaced by a positive feature map phi(x) = elu(x) + 1, so attention becomes
a running sum. RoFormer rotates the features in the numerator only and keeps the
denominator free of the rotation (it stays positive, no division by ~0):

    y_m = sum_{n<=m} (R_m phi(q_m)) . (R_n phi(k_n)) v_n  /  sum_{n<=m} phi(q_m) . phi(k_n)

         = (R_m phi(q_m)) . S_m  /  phi(q_m) . z_m,
           S_m = sum_{n<=m} (R_n phi(k_n)) v_n^T   (D, D),   z_m = sum_{n<=m} phi(k_n)   (D,)

R is whatever pe.rotate does. S and z are prefix sums taken chunk by chunk (linear in T); a cache
keeps only the sums after the last token. Encodings that need the score matrix are refused.
"""
import torch
from torch import nn
from torch.nn import functional as F

from attention.states import EncodingStates

EPS = 1e-6
CHUNK = 64   # tokens summed with a small (chunk, chunk) product; past chunks enter through S, z


def feature_map(x):
    return F.elu(x) + 1.0


def causal_linear_attention(q, k, v, pe, ctx, state=None, chunk=CHUNK):
    """q, k, v: (B, H, T, D) projections at positions ctx.q_pos (T,); state: (S, z) summing
    the earlier tokens, or None. Returns y (B, H, T, D) and the state after the last token.
    Inside a chunk a masked (chunk, chunk) product; chunk=1 is the pure recurrence, chunk >= T
    the quadratic form; all give the same y."""
    B, H, T, D = q.shape
    fq, fk = feature_map(q), feature_map(k)                                # (B, H, T, D), > 0
    rq, rk = pe.rotate(fq, ctx), pe.rotate(fk, ctx, key=True)
    S, z = state if state is not None else (q.new_zeros(B, H, D, D), q.new_zeros(B, H, D))
    out = []
    for s in range(0, T, chunk):
        c = slice(s, s + chunk)
        causal = torch.ones(min(chunk, T - s), min(chunk, T - s), dtype=torch.bool, device=q.device).tril()
        num = (rq[:, :, c] @ rk[:, :, c].transpose(-1, -2) * causal) @ v[:, :, c] + rq[:, :, c] @ S   # (B, H, c, D)
        den = (fq[:, :, c] @ fk[:, :, c].transpose(-1, -2) * causal).sum(-1, keepdim=True)
        den = den + fq[:, :, c] @ z[..., None]                              # (B, H, c, 1)
        out.append(num / (den + EPS))
        S = S + rk[:, :, c].transpose(-1, -2) @ v[:, :, c]                  # (B, H, D, D)
        z = z + fk[:, :, c].sum(2)                                          # (B, H, D)
    return torch.cat(out, dim=2), (S, z)


class LinearSelfAttention(nn.Module):
    """Drop-in for model.CausalSelfAttention (same projections and forward signature)."""

    def __init__(self, cfg, layer: int):
        super().__init__()
        self.n_head, self.n_embd, self.layer = cfg.n_head, cfg.n_embd, layer
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x, pe, plan):
        B, T, C = x.shape
        cache = plan.cache
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        state = cache.read(self.layer) if cache is not None else None       # (S, z) or None
        y, (S, z) = causal_linear_attention(q, k, v, pe, plan, state)
        if cache is not None:
            cache.write(self.layer, S, z)
        y = y.transpose(1, 2).contiguous().view(B, T, C)                    # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class LinearAttentionCache(EncodingStates):
    """Linear attention's running sums after the last token, S (L, B, H, D, D) and z (L, B, H, D):
    constant memory whatever the length. key_positions(T) gives only the T new positions; what encodings
    keep for the generation (states: conv's ring, the RNN's state, Floater's solved rows) is theirs to size
    (n_positions 0: no positions are laid out ahead, so RoPE keeps no table)."""

    def __init__(self, n_layer, batch, n_head, head_dim, dtype, device):
        super().__init__()
        D = head_dim
        S = torch.zeros(n_layer, batch, n_head, D, D, dtype=dtype, device=device)
        self.register_buffer("S", S, persistent=False)
        self.register_buffer("z", torch.zeros(n_layer, batch, n_head, D, dtype=dtype, device=device), persistent=False)
        self.max_len, self.length, self.period = float("inf"), 0, 0
        self.n_positions = 0

    def begin(self, pos, doc=None, slots=None):
        pass

    def key_positions(self, T):
        return torch.arange(self.length, self.length + T, device=self.S.device)

    def read(self, layer):
        return (self.S[layer], self.z[layer]) if self.length else None

    def write(self, layer, S, z):
        self.S[layer], self.z[layer] = S, z

    def advance(self, T):
        self.length += T

    def reset(self):
        self.length = 0
        self.drop_states()
