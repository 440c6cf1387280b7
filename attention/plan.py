"""The attention plan: how the layers of one forward, encoding and window attend. The positions they
share (positional.base.Ctx), the encoding, its score bias, dropout, and the kernel choose_kernel picks
from these alone (model.py's comment lists the kernels; model.attend runs them). make_plans builds one
plan per (encoding, window) of a forward.
"""
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F

from attention import long_cpu
from attention.flex import Flex
from positional.base import Ctx, shifted_groups

MASKLESS = ("causal", "flex") + long_cpu.KERNELS   # kernels that make their own mask


@dataclass(eq=False)
class AttentionPlan(Ctx):
    """How the layers of one forward, encoding and window attend: the positions (Ctx), the kernel,
    its mask."""
    pe: object = None                   # the encoding: its dense bias is made here, or by the kernel
    bias: torch.Tensor = None           # (H, Tq, Tk) the encoding's score bias, or None (from pe)
    dropout: float = 0.0                # attention dropout of this forward (0 when not training)
    flex: Flex = None                   # the model's FlexAttention; None: never flex
    key_counts: torch.Tensor = None     # (Tq,) keys each query sees, for SSMax; None unless asked
    kernel: str = field(init=False)
    sdpa_masks: dict = field(init=False, default_factory=dict)  # dtype -> the mask as SDPA takes it

    def __post_init__(self):
        super().__post_init__()
        self.kernel = choose_kernel(self)
        if self.kernel in MASKLESS:
            return
        if self.bias is None and self.pe is not None:
            self.bias = self.pe.dense_bias(self.q_pos, self.k_pos)          # (H, Tq, Tk) or None
        visible = self.visible()
        self.mask = visible if self.bias is None else self.bias.masked_fill(~visible, float("-inf"))

    def softmax(self, scores, v):
        return attend_scores(scores, v, self)

    def block(self, a, b):
        """The plan of the queries a:b over the keys up to row b (own keys) or all keys."""
        end = b if self.causal else len(self.k_pos)
        bias = None if self.bias is None else self.bias[..., a:b, :end]
        counts = None if self.key_counts is None else self.key_counts[a:b]
        return replace(self, q_pos=self.q_pos[a:b], k_pos=self.k_pos[:end], causal=False,
                       rows=slice(a, b), bias=bias, scratch=self.scratch, key_counts=counts)

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
    if flex_ok and biased and not own and p.dropout == 0.0 and p.causal and p.groups is None:
        if p.flex.usable(p.q_pos.device, [p.pe]):
            return "flex"
    if not grad and len(p.q_pos) > long_cpu.ATTENTION_BLOCK:
        steps = plain and bool((p.q_pos.diff() == 1).all())   # consecutive positions, causal mask alone
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
    mask = plan.mask
    if mask.dtype == torch.bool:
        scores = scores.masked_fill_(~mask, float("-inf"))
    else:
        scores = scores.add_(mask)
    probs = F.dropout(torch.softmax(scores.float(), dim=-1).to(v.dtype), plan.dropout, plan.dropout > 0)
    return probs @ v, probs



def make_plans(model, pos, cache, encodings, doc=None, n_positions=0):
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
                             k_doc=k_doc, cache=cache, groups=groups, n_positions=n_positions,
                             pe=encodings[layer.encoding], bias=biases.get(layer.encoding),
                             dropout=dropout, flex=model.flex)
        biases.setdefault(layer.encoding, plan.bias)                        # (H, Tq, Tk) or None
        if cfg.ssmax:
            plan.key_counts = plan.count_visible(long_cpu.ATTENTION_BLOCK)
        plans[layer] = plan
    return plans
