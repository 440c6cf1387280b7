"""The attention kernels, the plan that says which one runs, and the one function that picks it.

GPT.forward builds one AttentionPlan per forward (from the positions, the encoding's score
bias, the window and sinks, dropout) and every layer calls attend(q, k, v, plan). The plan
holds everything the choice depends on; choose_kernel reads it and nothing else. No
encoding is named here:

  kernel     when                                          runs
  causal     no bias, no window, Tq == Tk                  SDPA is_causal=True (fused flash, CPU and CUDA)
  sdpa       no bias: a window, or Tq != Tk (cached        SDPA with the bool mask (1, 1, Tq, Tk)
             decoding; SDPA's is_causal is upper-left)
  sdpa       a bias (H, Tq, Tk) that needs no gradient     SDPA with the bias as (1, H, Tq, Tk)  [ALiBi; eval]
  explicit   a bias that needs a gradient                  q k^T, bias added in place, softmax  [T5 training]
  flex       a bias on CUDA, Tq == Tk, no dropout          FlexAttention, bias read by a
                                                           score_mod, -inf blocks skipped       [unmeasured]

Encodings that form their scores themselves (attention_logits: ReRoPE, Shaw,
Transformer-XL) use attend_scores with the same plan's mask instead. In training, the
explicit path and the encodings that allow it (scores_by_query_block) work by causal query
blocks (causal_blocks): keys hidden from a whole block are left out, exactly.

Measured on a 2-core CPU (benchmarks/), the choices rest on two facts of PyTorch 2.13's
CPU SDPA: a 3-D float mask (H, Tq, Tk) sends it to the unfused math kernel while the same
mask as 4-D (1, H, Tq, Tk) takes the flash kernel, which is then as fast as is_causal; and
a mask that needs a gradient always falls back to the math kernel, which is slower than
the hand-written path below. FlexAttention has no backward on CPU, and without
torch.compile it materialises the scores, so it is used on CUDA only. Rewriting ALiBi's
bias into the q.k product (one extra channel) was measured too: slower than the 4-D mask,
because SDPA then needs v padded to the same head size, and less precise far from the
centre; it is not used.

Tensor contract: q (B, H, Tq, D), k and v (B, H, Tk, D) -> (B, H, Tq, D).
"""
import dataclasses
import functools
import math
import warnings
from dataclasses import dataclass, field

import torch
from torch.nn import functional as F


def attention_mask(bias, q_pos, k_pos, window=0, sinks=0):
    """What attention adds to its logits. None means 'plain causal', which lets SDPA take
    its fast is_causal path; that is only right when queries and keys are the same
    positions (SDPA's is_causal is upper-left aligned). Otherwise a bool mask (Tq, Tk),
    or the bias (H, Tq, Tk) with -inf where a key is not visible."""
    if bias is None and not window and len(q_pos) == len(k_pos):
        return None
    dist = q_pos[:, None] - k_pos[None, :]                   # (Tq, Tk), >= 0 for past keys
    visible = dist >= 0
    if window:
        visible &= (dist < window) | (k_pos[None, :] < sinks)
    if bias is None:
        return visible
    return bias.masked_fill(~visible, float("-inf"))


class FlexState:
    """Owned by one model: whether FlexAttention still may run (it is given up, with one
    warning, after its first failure: an older torch, an unsupported head size)."""

    def __init__(self):
        self.error = None

    def fail(self, e):
        self.error = e
        warnings.warn(f"FlexAttention failed ({type(e).__name__}: {e}); using SDPA for this model")


@dataclass
class AttentionPlan:
    """How every layer of one forward attends (see the module docstring for the table).
    Built once per forward by GPT.forward; only `kernel` may change, to the fallback,
    if FlexAttention fails during the forward."""
    q_pos: torch.Tensor                 # (Tq,) absolute positions of the queries; its device is the run's
    k_pos: torch.Tensor                 # (Tk,) absolute positions of the keys (cached, then new)
    bias: torch.Tensor = None           # (H, Tq, Tk) the encoding's score bias, or None
    window: int = 0                     # > 0: a query sees keys less than `window` behind it...
    sinks: int = 0                      # ...and the first `sinks` positions
    dropout: float = 0.0                # attention dropout of this forward (0 when not training)
    flex: FlexState = None              # the model's FlexAttention state; None: never FlexAttention
    key_counts: torch.Tensor = None     # (Tq,) keys each query sees, for SSMax (temperature.py); None unless asked
    mask: torch.Tensor = field(init=False)   # None (plain causal), (Tq, Tk) bool, or the bias with -inf
    kernel: str = field(init=False)
    block_mask: object = field(init=False, default=None)   # FlexAttention's BlockMask (kernel "flex")
    sdpa_masks: dict = field(init=False, default_factory=dict)   # dtype -> the mask as SDPA takes it

    def __post_init__(self):
        self.mask = attention_mask(self.bias, self.q_pos, self.k_pos, self.window, self.sinks)
        self.kernel = choose_kernel(self)

    def block(self, a, b, end):
        """The plan of queries a:b over keys :end (the bias and counts cut to them)."""
        bias = None if self.bias is None else self.bias[..., a:b, :end]
        counts = None if self.key_counts is None else self.key_counts[a:b]
        return dataclasses.replace(self, q_pos=self.q_pos[a:b], k_pos=self.k_pos[:end], bias=bias, key_counts=counts)

    def sdpa_mask(self, dtype):
        """The mask as SDPA's attn_mask, (1, H or 1, Tq, Tk) additive in dtype, made once per forward
        and shared by the layers (given a bool mask, SDPA would convert it again in every layer)."""
        if dtype not in self.sdpa_masks:
            m = self.mask
            if m.dtype == torch.bool:
                m = torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill(~m, float("-inf"))
            self.sdpa_masks[dtype] = m.to(dtype).view((1,) * (4 - m.dim()) + tuple(m.shape))
        return self.sdpa_masks[dtype]

    @property
    def bias_needs_grad(self):
        return self.bias is not None and self.bias.requires_grad and torch.is_grad_enabled()


def choose_kernel(p: AttentionPlan) -> str:
    """The one place a kernel is chosen, from the plan alone."""
    if p.mask is None:
        return "causal"
    if p.bias is None:
        return "sdpa"
    if (p.flex is not None and p.flex.error is None and p.q_pos.is_cuda and p.dropout == 0.0
            and len(p.q_pos) == len(p.k_pos)):
        return "flex"
    return "explicit" if p.bias_needs_grad else "sdpa"


@functools.lru_cache(maxsize=None)
def compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention
    return torch.compile(flex_attention, dynamic=False)


def flex_block_mask(mask):
    """FlexAttention's BlockMask of the keys `mask` (H, Tq, Tk) leaves visible in any head."""
    from torch.nn.attention.flex_attention import create_block_mask
    visible = ~torch.isneginf(mask.detach()).all(0)                       # (Tq, Tk)
    Tq, Tk = visible.shape
    return create_block_mask(lambda b, h, qi, ki: visible[qi, ki], None, None, Tq, Tk, device=mask.device)


def flex_attention(q, k, v, mask, block_mask=None, compiled=True):
    """FlexAttention with the shared bias read by a score_mod and its -inf entries turned
    into a block mask, so hidden blocks are skipped and no (B, H, Tq, Tk) is stored; the
    bias gets its gradient through the score_mod. mask: (H, Tq, Tk) float.
    Unmeasured: no GPU was available when this was written (see benchmarks/)."""
    from torch.nn.attention.flex_attention import flex_attention as flex
    block_mask = flex_block_mask(mask) if block_mask is None else block_mask
    bias = mask  # kept in float32: FlexAttention forms the scores in float32 whatever q's dtype
    return (compiled_flex() if compiled else flex)(q, k, v, score_mod=lambda s, b, h, qi, ki: s + bias[h, qi, ki],
                                                   block_mask=block_mask)


def causal_blocks(T):
    """Query blocks of the explicit path when keys are the queries' own positions: block r
    needs only the keys up to its last row, so 2 blocks compute 3/4 of the full square's
    products and 4 blocks 5/8 (blocks of at least 64 rows, where the products stay efficient)."""
    n = max(1, min(4, T // 64))
    edges = [T * i // n for i in range(n + 1)]
    return list(zip(edges[:-1], edges[1:]))


def explicit_attention(q, k, v, mask, dropout=0.0, training=False, causal=False):
    """softmax(q k^T / sqrt(D) + mask) v written out: the scaled product, then the bias added
    to it in place, broadcast over the batch (no (B, H, Tq, Tk) copy of the bias, which a
    baddbmm would need). Used where the mask needs a gradient (a learned bias). Stores the
    probabilities for backward, as any unfused path must. causal: queries and keys are the
    same increasing positions, so the keys past a query block's last row, hidden from all of
    it, are left out (causal_blocks); the other blocks' results are the same numbers.
    mask: (H, Tq, Tk) float or (Tq, Tk) bool."""
    D, Tq, Tk = q.shape[-1], q.shape[2], k.shape[2]
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=q.dtype, device=q.device).masked_fill(~mask, float("-inf"))
    ys = []
    for a, b in causal_blocks(Tq) if causal else [(0, Tq)]:
        end = b if causal else Tk
        scores = (q[:, :, a:b] * (1.0 / math.sqrt(D))) @ k[:, :, :end].transpose(-1, -2)   # (B, H, b - a, end)
        scores += mask[..., a:b, :end].to(q.dtype)
        p = F.dropout(torch.softmax(scores.float(), dim=-1).to(v.dtype), dropout, training)
        ys.append(p @ v[:, :, :end])                                        # (B, H, b - a, D)
    return torch.cat(ys, dim=2) if len(ys) > 1 else ys[0]


def attend_scores(scores, v, plan):
    """softmax(scores + mask) v for scores an encoding formed itself (attention_logits:
    ReRoPE, Shaw, Transformer-XL). scores: (B, H, Tq, Tk), 1/sqrt(D) included, a new tensor
    that this function masks in place; the mask is the plan's. Returns y (B, H, Tq, D) and
    the probabilities, which attention_values may use."""
    mask = plan.mask
    if mask is None:
        Tq, Tk = scores.shape[-2:]
        mask = torch.ones(Tq, Tk, dtype=torch.bool, device=scores.device).tril()
    # In place: the scores are this layer's own new tensor, and the ops that form them (matmul,
    # baddbmm, add, gather) do not keep their output for backward; one (B, H, Tq, Tk) copy saved.
    scores = scores.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else scores.add_(mask)
    probs = F.dropout(torch.softmax(scores.float(), dim=-1).to(v.dtype), plan.dropout, plan.dropout > 0)
    return probs @ v, probs


def attend(q, k, v, plan):
    """Attention of q over k, v with the kernel the plan chose (see the module docstring)."""
    kernel, mask, dropout = plan.kernel, plan.mask, plan.dropout
    if kernel == "causal":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
    if kernel == "flex":
        try:
            if plan.block_mask is None:  # once per forward, shared by the layers
                plan.block_mask = flex_block_mask(mask)
            return flex_attention(q, k, v, mask, plan.block_mask)
        except Exception as e:  # the other kernels still work: fall back for this model
            plan.flex.fail(e)
            plan.kernel = choose_kernel(plan)
            return attend(q, k, v, plan)
    if kernel == "explicit":  # keys at the queries' positions (no cache): hidden key blocks skipped
        return explicit_attention(q, k, v, mask, dropout, dropout > 0, plan.q_pos is plan.k_pos)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=plan.sdpa_mask(q.dtype), dropout_p=dropout)
