"""Causal linear attention with rotary positions (Katharopoulos et al. 2020, "Transformers
are RNNs", https://arxiv.org/abs/2006.16236; RoFormer, Su et al. 2021, sec. 3.3,
https://arxiv.org/abs/2104.09864).

Softmax is replaced by a positive feature map phi(x) = elu(x) + 1, so attention becomes
a running sum. RoFormer rotates the features in the numerator only and keeps the
denominator free of the rotation (it stays positive, no division by ~0):

    y_m = sum_{n<=m} (R_m phi(q_m)) . (R_n phi(k_n)) v_n  /  sum_{n<=m} phi(q_m) . phi(k_n)

         = (R_m phi(q_m)) . S_m  /  phi(q_m) . z_m,
           S_m = sum_{n<=m} (R_n phi(k_n)) v_n^T   (D, D),   z_m = sum_{n<=m} phi(k_n)   (D,)

R is whatever pe.rotate does (rope, xpos; the identity for none, learned, sinusoidal),
so the numerator depends on m - n only: shifting all positions changes nothing.
S and z are prefix sums over the sequence (cumsum): no (T, T) matrix, memory
(B, H, T, D, D). With a KV cache, the sums at the last token are all that is kept
(cache.state[layer]), so decoding costs O(1) per token whatever the length.

Encodings that act on the (Tq, Tk) score matrix (score_bias, attention_logits; their
needs_score_matrix capability) cannot work here, and GPT refuses them at construction.
"""
import torch
from torch import nn
from torch.nn import functional as F

EPS = 1e-6


def feature_map(x):
    return F.elu(x) + 1.0


def causal_linear_attention(q, k, v, pe, pos, state=None):
    """q, k, v: (B, H, T, D) projections at positions pos (T,); state: (S, z) summing
    the earlier tokens, or None. Returns y (B, H, T, D) and the state after the last token."""
    fq, fk = feature_map(q), feature_map(k)                                # (B, H, T, D), > 0
    rq, rk = pe.rotate(fq, pos), pe.rotate(fk, pos, is_key=True)
    S = torch.einsum("bhtd,bhte->bhtde", rk, v).cumsum(2)                  # (B, H, T, D, D)
    z = fk.cumsum(2)                                                       # (B, H, T, D)
    if state is not None:
        S, z = S + state[0][:, :, None], z + state[1][:, :, None]
    num = torch.einsum("bhtd,bhtde->bhte", rq, S)                          # (B, H, T, D)
    den = (fq * z).sum(-1, keepdim=True)                                   # (B, H, T, 1)
    return num / (den + EPS), (S[:, :, -1], z[:, :, -1])


class LinearSelfAttention(nn.Module):
    """Drop-in for model.CausalSelfAttention (same projections and forward signature)."""

    def __init__(self, cfg, layer: int):
        super().__init__()
        self.n_head, self.n_embd, self.layer = cfg.n_head, cfg.n_embd, layer
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x, pe, pos, k_pos, mask, cache=None):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        state = None
        if cache is not None and cache.length > 0:
            length, *state = cache.state[self.layer]
            if length != cache.length:
                raise RuntimeError(f"linear attention state covers {length} tokens, the cache {cache.length}; "
                                   f"call reset_cache() or setup_cache() before a new sequence")
        y, (S, z) = causal_linear_attention(q, k, v, pe, pos, state)
        if cache is not None:
            cache.state[self.layer] = (cache.length + T, S, z)
        y = y.transpose(1, 2).contiguous().view(B, T, C)                    # (B, T, C)
        return self.resid_dropout(self.c_proj(y))
