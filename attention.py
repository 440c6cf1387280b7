"""The attention kernels, and the one place that picks between them.

GPT.forward builds the mask once per forward (model.attention_mask) and every layer calls
attend(q, k, v, mask, ...). What the encoding provides decides the kernel; no encoding
is named here:

  mask is None        plain causal, queries and keys at the same positions
                      -> SDPA with is_causal=True (the fused flash kernel on CPU and CUDA)
  mask is bool        a window, or cached decoding (Tq != Tk)
                      -> SDPA with the bool mask
  mask is float       a score bias (H, Tq, Tk) with -inf where a key is hidden
      no gradient     -> SDPA with the mask passed as (1, H, Tq, Tk)            [ALiBi; eval]
      gradient        -> explicit_attention: one baddbmm, softmax, bmm          [T5 training]
      CUDA, Tq == Tk  -> FlexAttention, the bias read by a score_mod             [unmeasured]

Measured on a 2-core CPU (benchmarks/), the choices rest on two facts of PyTorch 2.13's
CPU SDPA: a 3-D float mask (H, Tq, Tk) sends it to the unfused math kernel while the same
mask as 4-D (1, H, Tq, Tk) takes the flash kernel, which is then as fast as is_causal; and
a mask that needs a gradient always falls back to the math kernel, which is slower than
the hand-written baddbmm path below. FlexAttention has no backward on CPU, and without
torch.compile it materialises the scores, so it is used on CUDA only. Rewriting ALiBi's
bias into the q.k product (one extra channel) was measured too: slower than the 4-D mask,
because SDPA then needs v padded to the same head size, and less precise far from the
centre; it is not used.

Tensor contract: q (B, H, Tq, D), k and v (B, H, Tk, D) -> (B, H, Tq, D).
"""
import math
import warnings

import torch
from torch.nn import functional as F

_flex = None           # compiled FlexAttention, built on first use (CUDA)
_block_mask = (None, None)  # (mask, its BlockMask): one per forward, shared by the layers
_flex_failed = []           # the error, once FlexAttention has failed in this process


def use_flex(q, k, mask, dropout=0.0):
    """FlexAttention for a score bias on CUDA, where it has a backward pass; full-length
    passes only (a decode step has one query: SDPA with the mask row is cheap, and a
    compiled kernel per cache length is not)."""
    return (q.is_cuda and mask is not None and mask.dtype != torch.bool and dropout == 0.0
            and q.shape[2] == k.shape[2])


def flex_attention(q, k, v, mask, compiled=True):
    """FlexAttention with the shared bias read by a score_mod and its -inf entries turned
    into a block mask, so hidden blocks are skipped and no (B, H, Tq, Tk) is stored; the
    bias gets its gradient through the score_mod. mask: (H, Tq, Tk) float.
    Unmeasured: no GPU was available when this was written (see benchmarks/)."""
    global _flex, _block_mask
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention as flex
    if _block_mask[0] is not mask:
        visible = ~torch.isneginf(mask.detach()).all(0)                   # (Tq, Tk)
        _block_mask = (mask, create_block_mask(lambda b, h, qi, ki: visible[qi, ki], None, None,
                                               q.shape[2], k.shape[2], device=q.device))
    if compiled and _flex is None:
        _flex = torch.compile(flex, dynamic=False)
    bias = mask  # kept in float32: FlexAttention forms the scores in float32 whatever q's dtype
    return (_flex if compiled else flex)(q, k, v, score_mod=lambda s, b, h, qi, ki: s + bias[h, qi, ki],
                                         block_mask=_block_mask[1])


def explicit_attention(q, k, v, mask, dropout=0.0, training=False):
    """softmax(q k^T / sqrt(D) + mask) v written out, the bias added by the matmul itself
    (baddbmm). Used where the mask needs a gradient (a learned bias). Stores the
    (B*H, Tq, Tk) probabilities for backward, as any unfused path must.
    mask: (H, Tq, Tk) float or (Tq, Tk) bool."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    bias = mask.to(q.dtype).expand(B, H, Tq, Tk).reshape(B * H, Tq, Tk)
    scores = torch.baddbmm(bias, q.reshape(B * H, Tq, D), k.reshape(B * H, Tk, D).transpose(1, 2),
                           alpha=1.0 / math.sqrt(D))                        # (B*H, Tq, Tk)
    p = F.dropout(torch.softmax(scores.float(), dim=-1).to(v.dtype), dropout, training)
    return torch.bmm(p, v.reshape(B * H, Tk, D)).view(B, H, Tq, D)


def attend_scores(scores, v, mask, dropout=0.0, training=False):
    """softmax(scores + mask) v for scores an encoding formed itself (attention_logits:
    ReRoPE, Shaw, Transformer-XL). scores: (B, H, Tq, Tk), 1/sqrt(D) included; mask as in
    attend (None: plain causal with Tq == Tk). Returns y (B, H, Tq, D) and the
    probabilities, which attention_values may use."""
    if mask is None:
        Tq, Tk = scores.shape[-2:]
        mask = torch.ones(Tq, Tk, dtype=torch.bool, device=scores.device).tril()
    scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    probs = F.dropout(torch.softmax(scores.float(), dim=-1).to(v.dtype), dropout, training)
    return probs @ v, probs


def attend(q, k, v, mask, dropout=0.0, training=False):
    """Attention of q over k, v under the shared mask (see the module docstring)."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout if training else 0.0)
    if mask.dtype != torch.bool:
        if use_flex(q, k, mask, dropout if training else 0.0) and not _flex_failed:
            try:
                return flex_attention(q, k, v, mask)
            except Exception as e:  # an older torch, an unsupported head size: the paths below still work
                _flex_failed.append(e)
                warnings.warn(f"FlexAttention failed ({type(e).__name__}: {e}); using SDPA for this run")
        if mask.requires_grad and torch.is_grad_enabled():
            return explicit_attention(q, k, v, mask, dropout, training)
        mask = mask.to(q.dtype)
    mask = mask.view((1,) * (4 - mask.dim()) + tuple(mask.shape))          # (1, H or 1, Tq, Tk)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout if training else 0.0)
