"""The per-forward plan of attention: the positions a forward's layers share (positional.base.Ctx),
checked on the host once (forward_positions), and one AttentionPlan per (encoding, window)
(make_plans) holding everything the choice of kernel depends on. choose_kernel reads the plan and
nothing else; model.attend runs what it chose:
  causal    keys are the queries' own positions, no bias, window or documents: SDPA is_causal
  sdpa      no bias (a mask), or a bias needing no gradient: SDPA with a (1, H, Tq, Tk) mask
  explicit  a bias needing a gradient (T5 training): q k^T, bias added in place, causal blocks
  flex      a bias, or an encoding's flex form (OwnLogits.flex_form), over own keys, no dropout, on
            CUDA, or on CPU without gradients if asked, where FlexAttention works (attention/flex.py:
            decided once per device)
  own       the encoding forms its own logits (pe.attend), over own keys by causal blocks (in training
            by blocks of pe.recompute_rows, recomputed in backward, where the encoding has them)
  blocks, relative, banded, own_blocks: over more than ATTENTION_BLOCK queries without gradients,
            the long-context engine (attention/long_cpu.py, which documents them)
Measured on CPU (benchmarks/): SDPA takes its flash kernel with a 4-D float mask, math with a 3-D
one or one needing a gradient (slower than explicit).
"""
import functools
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from attention import long_cpu
from attention.flex import Flex
from attention.linear import LinearAttentionCache
from positional.base import Ctx, check_positions, shifted_groups

MASKLESS = ("causal", "flex") + long_cpu.KERNELS   # kernels that make their own mask


@dataclass(frozen=True, eq=False)
class AttentionPlan(Ctx):
    """How the layers of one forward, encoding and window attend: the positions (Ctx), the kernel,
    its mask; made once per forward (make_plans) and never changed."""
    pe: object = None                   # the encoding: its dense bias is made here, or by the kernel
    bias: torch.Tensor = None           # (H, Tq, Tk) the encoding's score bias, or None (from pe)
    dropout: float = 0.0                # attention dropout of this forward (0 when not training)
    flex: Flex = None                   # the model's FlexAttention; None: never flex
    ssmax: bool = False                 # count the keys each query sees (key_counts), for SSMax
    key_counts: torch.Tensor = None     # (Tq,) keys each query sees (SSMax's n), or None
    kernel: str = field(init=False)
    mask: torch.Tensor = field(init=False, default=None)    # (Tq, Tk) bool, or the bias, -inf hidden
    unseen: torch.Tensor = field(init=False, default=None)  # ~mask for own logits (hidden())
    sdpa_masks: dict = field(init=False, default_factory=dict)  # dtype -> the mask as SDPA takes it

    def __post_init__(self):
        super().__post_init__()
        derive = functools.partial(object.__setattr__, self)   # the plan's derived fields, set once
        if self.ssmax and self.key_counts is None:
            derive("key_counts", self.count_visible(long_cpu.ATTENTION_BLOCK))
        derive("kernel", choose_kernel(self))
        if self.kernel in MASKLESS or (self.kernel == "own" and self.causal):   # own: each block makes its mask
            return
        if self.bias is None and self.pe is not None:
            derive("bias", self.pe.dense_bias(self.q_pos, self.k_pos))     # (H, Tq, Tk) or None
        visible = self.visible()
        derive("mask", visible if self.bias is None else self.bias.masked_fill(~visible, float("-inf")))
        if self.pe is not None and self.pe.overrides("attend"):
            derive("unseen", ~visible)

    def seen(self):
        return self.mask if self.mask is not None and self.mask.dtype == torch.bool else self.visible()

    def hidden(self):
        return self.unseen if self.unseen is not None else ~self.seen()

    def seen_rows(self, a, b):
        if self.mask is not None and self.mask.dtype == torch.bool:   # made once for the layers: sliced
            return self.mask[..., a:b, :]
        return super().seen_rows(a, b)

    def softmax(self, scores, v):
        return attend_scores(scores, v, self)

    def drop(self, weights):
        return F.dropout(weights, self.dropout, True) if self.dropout > 0 else weights

    def drops(self):
        return self.dropout > 0

    def block(self, a, b):
        """The plan of the queries a:b over the keys up to row b (own keys) or all keys."""
        end = b if self.causal else len(self.k_pos)
        bias = None if self.bias is None else self.bias[..., a:b, :end]
        counts = None if self.key_counts is None else self.key_counts[a:b]
        return replace(self, q_pos=self.q_pos[a:b], k_pos=self.k_pos[:end], causal=False,
                       rows=slice(a, b), bias=bias, memo=self.memo, key_counts=counts)

    def sdpa_mask(self, dtype):
        """The mask as SDPA's attn_mask, (1, H or 1, Tq, Tk) additive, made once for all layers."""
        if dtype not in self.sdpa_masks:
            m = self.mask
            if m.dtype == torch.bool:
                m = torch.where(m, 0.0, float("-inf"))
            self.sdpa_masks[dtype] = m.to(dtype).view((1,) * (4 - m.dim()) + tuple(m.shape))
        return self.sdpa_masks[dtype]


def choose_kernel(p: AttentionPlan) -> str:
    """The one place a kernel is chosen, from the plan alone."""
    own = p.pe is not None and p.pe.overrides("attend")
    biased = p.bias is not None or (p.pe is not None and p.pe.overrides("score_bias"))
    grad = torch.is_grad_enabled()
    plain = p.causal and not p.window and p.doc is None and p.groups is None   # only future keys hidden
    if not (own or biased):
        return "causal" if plain else "sdpa"
    # CPU from 128 queries: below, torch 2.13's AVX2 kernel errs at T = 8 mod 16
    on_cpu = p.flex is not None and p.flex.cpu and not grad and len(p.q_pos) >= 128
    flex_ok = p.flex is not None and (p.q_pos.is_cuda or on_cpu)
    flexed = p.pe.flex_formed if own else biased   # a bias in the score_mod, or the encoding's flex form
    if flex_ok and flexed and p.dropout == 0.0 and p.causal and p.groups is None:
        if p.flex.usable(p.q_pos.device):
            return "flex"
    if not grad and len(p.q_pos) > long_cpu.ATTENTION_BLOCK:
        steps = plain and bool((p.q_pos.diff() == 1).all())   # consecutive positions, causal mask alone
        if own and p.pe.attends_by_blocks:   # every query at once: its blocks carry what the next one reads
            return "own_blocks"
        if own:  # its logits on the near keys, the far ones by the fused CPU kernel (its log-sum-exp)
            banded = steps and p.pe.overrides("far") and not p.q_pos.is_cuda
            return "banded" if banded else "blocks"
        return "relative" if steps and p.bias is None and p.pe.relative_bias else "blocks"
    if own:
        return "own"
    if p.bias is not None:
        learned = p.bias.requires_grad
    else:
        learned = any(t.requires_grad for t in p.pe.parameters())
    return "explicit" if learned and grad else "sdpa"


def attend_scores(scores, v, plan):
    """(softmax(scores + mask) v, probs) for scores an encoding formed (1/sqrt(D) in; masked in place)."""
    mask = plan.mask if plan.mask is not None else plan.visible()   # a causal own plan makes none ahead
    if mask.dtype == torch.bool:
        scores = scores.masked_fill_(~mask, float("-inf"))
    else:
        scores = scores.add_(mask)
    wide = torch.promote_types(scores.dtype, torch.float32)   # float32 under autocast, float64 kept
    probs = F.dropout(torch.softmax(scores, dim=-1, dtype=wide).to(v.dtype), plan.dropout, plan.dropout > 0)
    return probs @ v, probs



def make_plans(model, pos, cache, encodings, doc=None, n_positions=0, places=None):
    """{Layer: AttentionPlan}: layers sharing (encoding, window) share one plan; the layers of an
    encoding share its score bias (every layer attends to the same key positions)."""
    cfg, plans, biases = model.config, {}, {}
    k_pos = cache.key_positions(len(pos)) if cache is not None else pos                 # (Tk,)
    k_doc = None
    if cache is not None and doc is not None:
        k_doc = cache.key_positions(len(pos), cache.slot_doc)
    groups = None
    if model.training and cfg.s2_group:
        groups = shifted_groups(len(pos), cfg.n_head, cfg.s2_group, pos.device)
    dropout = cfg.dropout if model.training else 0.0
    for layer in model.schedule:
        if layer in plans:
            continue
        plan = AttentionPlan(pos, k_pos, layer.window, cfg.sinks, causal=cache is None, doc=doc,
                             k_doc=k_doc, cache=cache, groups=groups, places=places, n_positions=n_positions,
                             pe=encodings[layer.encoding], bias=biases.get(layer.encoding),
                             dropout=dropout, flex=model.flex, ssmax=cfg.ssmax)
        biases.setdefault(layer.encoding, plan.bias)                        # (H, Tq, Tk) or None
        plans[layer] = plan
    return plans


def forward_positions(model, T, cache, pos, doc, device):
    """(T,) positions of the model's (self's) forward of T tokens and its last one + 1, checked on
    the host: pos, explicit positions (None: from the cache's length), doc, document ids."""
    start = cache.length if cache is not None else 0
    if pos is not None and cache is not None:   # in order past the cache (training has none)
        ordered = len(pos) > 0 and int(pos[0]) >= start and bool((pos.diff() > 0).all())
        if not (not isinstance(cache, LinearAttentionCache) and cache.period == 0 and ordered):
            raise ValueError(f"explicit positions continue a KV cache in order, from position "
                             f"{start} on, without a window's ring; got {pos.tolist()[:8]}...: "
                             f"clear the cache or pass increasing positions")
    if doc is not None and model.config.attention == "linear":
        raise ValueError("document ids need softmax attention (linear attention sums every "
                         "earlier key)")
    check_positions(pos, doc, T)
    end = start + T if pos is None else int(pos.max()) + 1
    limit = model.max_positions
    if limit is not None and end > limit:
        raise ValueError(f"the {model.pos_name} encoding knows {limit} positions, got a "
                         f"sequence reaching position {end}; crop the input or use an "
                         f"encoding without a limit")
    if cache is not None and end > cache.max_len:
        raise ValueError(f"KV cache holds {cache.max_len} positions, this call needs {end}; "
                         f"call setup_cache with a larger max_len")
    if pos is None:
        return torch.arange(start, end, device=device), end
    return pos.to(device), end
