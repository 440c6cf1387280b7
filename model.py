"""A GPT in one file (nanoGPT's spirit), its KV cache and generation beside it (gpt-fast's), with a
pluggable positional encoding (positional/base.py) whose hooks are called unconditionally: pe.embed(x, ctx),
pe.rotate(x, ctx, key) on queries and keys, pe.score_bias(h, q, k) added to the logits, and pe.attend(q, k,
v, ctx, layer) for the few encodings that form their own logits. No encoding-specific code here. Positions
are absolute and explicit (GPT.forward derives them from the cache offset, or takes them), so training, long
evaluation and cached decoding share one code path.
"""
import functools
import math
import time
import types
import warnings
from dataclasses import dataclass, field, replace

import torch
import torch.nn as nn
from torch.nn import functional as F

from positional.base import Ctx, check_positions, sees, shifted_groups
from positional.linear_attention import LinearAttentionCache, LinearSelfAttention
from positional.schedule import build_layers, pattern_label
from positional.temperature import logn_factor, ssmax_factor, ssmax_init


@dataclass
class GPTConfig:
    block_size: int = 256           # training context; only `learned` is bound to it
    vocab_size: int = 50304
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0
    bias: bool = False              # bias in Linear and LayerNorm layers
    pos_encoding: str = "rope"      # a key of positional.REGISTRY
    rope_scaling: str = ""          # RoPE length extension: a name of positional.SCALINGS, "" for none
    pos_settings: dict = field(default_factory=dict)   # the chosen encoding's and method's settings, by key
    window: int = 0                 # > 0: each query sees only the last `window` keys
    sinks: int = 0                  # with a window: the first `sinks` positions stay visible
    attention: str = "softmax"      # "linear": elu+1 linear attention (positional/linear_attention.py)
    max_position: int = 0           # positions seen in training with position_sampling (M or PoSE's target); 0: block_size
    qk_norm: bool = False           # RMS-normalise q and k per head (learned gain), before the positional transform
    logn_scaling: bool = False      # queries scaled by max(1, log n / log L) at position n (positional/temperature.py)
    ssmax: bool = False             # SSMax: logits scaled by s_h log(n), n the keys a query sees, s_h learned
    layer_encodings: str = ""       # per-layer encodings, a comma pattern ("rope,rope,rope,none"); positional/schedule.py
    layer_windows: str = ""         # per-layer windows, a comma pattern ("32,0"; 0 global); "" = `window` everywhere
    norm: str = "layernorm"         # or "rmsnorm" (Llama): the blocks' and the final normalisation
    norm_eps: float = 1e-5
    mlp: str = "gelu"               # or "swiglu" (Llama): silu(gate) * up
    mlp_hidden: int = 0             # the MLP's hidden size; 0: 4C (gelu), or Llama's 8C/3 up to a multiple of 256 (swiglu)
    n_kv_head: int = 0              # key/value heads, each shared by n_head / n_kv_head queries (GQA); 0: n_head
    tie_embeddings: bool = True     # lm_head shares wte's weight
    embed_std: float = 0.02         # wte's initial std (GPT-2's 0.02); 1.0 lets MQAR's lookup form (docs/tasks.md)
    parallel_residual: bool = False   # GPT-NeoX: x + attn(ln_1(x)) + mlp(ln_2(x))
    attention_kernel: str = ""      # "flex": biases by FlexAttention at evaluation on CPU too (compiled once)
    s2_group: int = 0               # > 0: LongLoRA's S²-Attn in training, groups of s2_group tokens (positional/base.py)


# ---- attention ------------------------------------------------------------------------------
# Every layer calls attend(q, k, v, plan); the plan (one per forward and (encoding, window)) holds
# everything the choice of kernel depends on, and choose_kernel reads it and nothing else:
#   causal    keys are the queries' own positions, no bias, no window, no documents: SDPA is_causal
#   sdpa      no bias (a mask), or a bias needing no gradient: SDPA with a 4-D (1, H, Tq, Tk) mask
#   explicit  a bias needing a gradient (T5 training): q k^T, bias added in place, by causal query blocks
#   flex      a bias over own keys, no dropout, on CUDA [unmeasured] or on CPU without gradients if asked (flex)
#   blocks    a bias or own logits, no gradients, > ATTENTION_BLOCK queries: by query blocks (O(H block Tk)); a bias at
#             positions in order goes by GPT.by_chunks instead (each chunk's bias made once for every layer)
#   relative  as blocks, a causal bias by distance alone (relative_bias) at consecutive positions: a view (O(H T))
# Measured on CPU (benchmarks/): SDPA takes its flash kernel with a 4-D float mask, math with a 3-D one or one
# needing a gradient (slower than explicit). FlexAttention has no backward on CPU, and is dense uncompiled.
# Tensor contract: q (B, H, Tq, D), k and v (B, H, Tk, D) -> (B, H, Tq, D).
ATTENTION_BLOCK, BLOCK_SCORES = 1024, 2 ** 22   # "blocks": query rows a block, fewer where B H rows Tk would pass 2^22


@dataclass(eq=False)
class AttentionPlan(Ctx):
    """How the layers of one forward, encoding and window attend: the positions (Ctx), the kernel, its mask."""
    pe: object = None                   # the encoding: its dense bias is made here, per block or in FlexAttention
    bias: torch.Tensor = None           # (H, Tq, Tk) the encoding's score bias, or None (made from pe)
    dropout: float = 0.0                # attention dropout of this forward (0 when not training)
    flex: dict = None                   # the model's FlexAttention state {"error", "cpu"}; None: never flex
    key_counts: torch.Tensor = None     # (Tq,) keys each query sees, for SSMax; None unless asked
    kernel: str = field(init=False)
    block_mask: object = field(init=False, default=None)       # FlexAttention's BlockMask
    sdpa_masks: dict = field(init=False, default_factory=dict)  # dtype -> the mask as SDPA takes it

    def __post_init__(self):
        super().__post_init__()
        self.choose()

    def choose(self):
        """Choose the kernel, and make the dense mask (and bias) it reads: blocks and flex make their own."""
        self.kernel = choose_kernel(self)
        if self.kernel in ("causal", "blocks", "flex", "relative", "banded"):  # no dense mask: they make their own
            return
        if self.bias is None and self.pe is not None:
            self.bias = self.pe.dense_bias(self.q_pos, self.k_pos)                # (H, Tq, Tk) or None
        visible = self.visible()
        self.mask = visible if self.bias is None else self.bias.masked_fill(~visible, float("-inf"))

    def softmax(self, scores, v):
        return attend_scores(scores, v, self)

    def block(self, a, b):
        """The plan of the queries a:b over the keys up to row b (own keys) or all keys, sharing the scratch."""
        end = b if self.causal else len(self.k_pos)
        return replace(self, q_pos=self.q_pos[a:b], k_pos=self.k_pos[:end], causal=False, rows=slice(a, b),
                       bias=None if self.bias is None else self.bias[..., a:b, :end], scratch=self.scratch,
                       key_counts=None if self.key_counts is None else self.key_counts[a:b])

    def sdpa_mask(self, dtype):
        """The mask as SDPA's attn_mask, (1, H or 1, Tq, Tk) additive, made once per forward for all layers."""
        if dtype not in self.sdpa_masks:
            m = torch.where(self.mask, 0.0, float("-inf")) if self.mask.dtype == torch.bool else self.mask
            self.sdpa_masks[dtype] = m.to(dtype).view((1,) * (4 - m.dim()) + tuple(m.shape))
        return self.sdpa_masks[dtype]


def choose_kernel(p: AttentionPlan) -> str:
    """The one place a kernel is chosen, from the plan alone."""
    own = p.pe is not None and p.pe.overrides("attend")
    biased = p.bias is not None or (p.pe is not None and p.pe.overrides("score_bias"))
    grad = torch.is_grad_enabled()
    plain = p.causal and not p.window and p.doc is None and p.groups is None   # hidden: the future keys alone
    if not (own or biased):
        return "causal" if plain else "sdpa"
    flex_ok = p.flex is not None and p.flex["error"] is None and (p.q_pos.is_cuda or (  # CPU from 128 queries: below,
        p.flex.get("cpu") and not grad and len(p.q_pos) >= 128))   # torch 2.13's AVX2 kernel errs at T = 8 mod 16
    if flex_ok and biased and not own and p.dropout == 0.0 and p.causal and p.groups is None:
        return "flex"
    if not grad and len(p.q_pos) > ATTENTION_BLOCK:
        steps = plain and bool((p.q_pos.diff() == 1).all())   # consecutive positions, the causal mask alone
        if own:  # its logits on the near keys, the far ones by the fused CPU kernel (its log-sum-exp)
            return "banded" if steps and p.pe.overrides("far") and not p.q_pos.is_cuda else "blocks"
        return "relative" if steps and p.bias is None and p.pe.relative_bias else "blocks"
    learned = p.bias.requires_grad if p.bias is not None else any(t.requires_grad for t in p.pe.parameters())
    return "explicit" if biased and learned and grad else "sdpa"


def flex_functions(state, compiled=True):
    """FlexAttention's (create_block_mask, flex_attention), compiled (the block mask built eagerly is dense) once per
    model (state: its flex dict): every model's score_mod is new to dynamo, which allows a code object 8 graphs."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if compiled and "compiled" not in state:
        state["compiled"] = tuple(torch.compile(own_code(f), dynamic=False) for f in (create_block_mask, flex_attention))
    return state["compiled"] if compiled else (create_block_mask, flex_attention)


def own_code(fn):
    """fn with a copy of its code object (and its keyword defaults): dynamo counts recompilations per code object."""
    copy = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return copy


def flex_attention(q, k, v, plan, compiled=True):
    """FlexAttention, score_bias(h, q, k) in its score_mod (its gradient flows), hidden blocks skipped (sees)."""
    block_mask, flex = flex_functions(plan.flex, compiled)
    qp, kp, pe, doc = at_index(plan.q_pos), at_index(plan.k_pos), plan.pe, plan.doc

    def visible(b, h, qi, ki):
        seen = sees(qp(qi), kp(ki), plan.window, plan.sinks)
        return seen if doc is None else seen & (doc[qi] == doc[ki])
    if plan.block_mask is None:
        plan.block_mask = block_mask(visible, None, None, len(plan.q_pos), len(plan.k_pos), device=q.device)
    with torch._functorch.config.patch(force_non_lazy_backward_lowering=torch.is_grad_enabled()):  # its backward
        return flex(q, k, v, score_mod=lambda s, b, h, qi, ki: s + pe.score_bias(h, qp(qi), kp(ki)).to(s.dtype),
                    block_mask=plan.block_mask)   # compiled now: a failure is caught by attend (FIRE's, CUDA, torch 2.11)


def at_index(pos):
    """i -> pos[i] in FlexAttention's mods: i + pos[0] when the positions are consecutive (no table read per pair)."""
    first = pos[0]
    return (lambda i: i + first) if bool((pos.diff() == 1).all()) else (lambda i: pos[i])


def by_blocks(q, k, v, plan, attend_block):
    """attend_block(q rows a:b, their keys, values, plan) by query blocks: ATTENTION_BLOCK rows or fewer (kernel
    "blocks"), else causal_blocks over own keys (each up to its last row: own logits in training), else all rows."""
    B, H, T, _ = q.shape
    if T == 1:  # a decode step: one block, nothing to slice (a step pays for every call it makes)
        return attend_block(q, k, v, plan)
    rows = min(ATTENTION_BLOCK, max(16, BLOCK_SCORES // (B * H * k.shape[2])))   # 16 MB of float32 scores at most
    blocks = [(a, min(a + rows, T)) for a in range(0, T, rows)] if plan.kernel == "blocks" else \
        causal_blocks(T) if plan.causal else [(0, T)]
    ys = []
    for a, b in reversed(blocks):   # the most keys first: each block's scores then fit where the last one's were
        p = plan if len(blocks) == 1 else plan.block(a, b)
        ys.append(attend_block(q[:, :, a:b], k[:, :, :len(p.k_pos)], v[:, :, :len(p.k_pos)], p))   # (B, H, b - a, D)
    return torch.cat(ys[::-1], dim=2) if len(ys) > 1 else ys[0]                    # (B, H, Tq, D)


def causal_blocks(T):
    """Query blocks over own keys, each needing keys up to its last row: 2 blocks do 3/4 of the products, 4 do 5/8."""
    n = max(1, min(4, T // 64))
    edges = [T * i // n for i in range(n + 1)]
    return list(zip(edges[:-1], edges[1:]))


def explicit_attention(q, k, v, mask, dropout=0.0, training=False, causal=False):
    """softmax(q k^T / sqrt(D) + mask) v written out, the bias added in place and broadcast over the
    batch (no (B, H, Tq, Tk) copy of it). causal: queries and keys at the same positions, so keys past a
    query block's last row are left out (causal_blocks). mask: (H, Tq, Tk) additive, -inf where hidden."""
    D, Tk, ys = q.shape[-1], k.shape[2], []
    for a, b in causal_blocks(q.shape[2]) if causal else [(0, q.shape[2])]:
        end = b if causal else Tk
        scores = (q[:, :, a:b] * (1.0 / math.sqrt(D))) @ k[:, :, :end].transpose(-1, -2)   # (B, H, b - a, end)
        scores += mask[..., a:b, :end].to(q.dtype)
        p = F.dropout(torch.softmax(scores.float(), dim=-1).to(v.dtype), dropout, training)
        ys.append(p @ v[:, :, :end])                                        # (B, H, b - a, D)
    return torch.cat(ys, dim=2) if len(ys) > 1 else ys[0]


def attend_scores(scores, v, plan):
    """(softmax(scores + mask) v, probs) for scores an encoding formed (1/sqrt(D) in; masked in place)."""
    mask = plan.mask
    scores = scores.masked_fill_(~mask, float("-inf")) if mask.dtype == torch.bool else scores.add_(mask)
    probs = F.dropout(torch.softmax(scores.float(), dim=-1).to(v.dtype), plan.dropout, plan.dropout > 0)
    return probs @ v, probs


def attend(q, k, v, plan):
    """Attention of q over k, v with the kernel the plan chose."""
    kernel, mask, dropout = plan.kernel, plan.mask, plan.dropout
    if kernel == "causal":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
    if kernel == "flex":
        try:
            return flex_attention(q, k, v, plan)
        except Exception as e:  # the other kernels still work: fall back for this model, with one warning
            plan.flex["error"] = e
            warnings.warn(f"FlexAttention failed ({type(e).__name__}: {str(e).strip()[:200]}); using SDPA for this model")
            plan.choose()
            return attend(q, k, v, plan)
    if kernel == "blocks":
        return by_blocks(q, k, v, plan, attend)
    if kernel == "relative":
        return plan.pe.attend_by_distance(q, k, v, causal_blocks(q.shape[2]))
    if kernel == "explicit":
        return explicit_attention(q, k, v, mask, dropout, dropout > 0, plan.causal)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=plan.sdpa_mask(q.dtype), dropout_p=dropout)


# ---- blocks ---------------------------------------------------------------------------------

def dropout(x, p, training):
    """F.dropout, not called where it does nothing (p = 0 or eval): a decode step pays for every call it makes."""
    return F.dropout(x, p, True) if training and p > 0 else x


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.n_head, self.n_kv_head, self.layer = cfg.n_head, cfg.n_kv_head or cfg.n_head, layer
        D = cfg.n_embd // cfg.n_head
        self.q_norm = nn.RMSNorm(D, eps=1e-6) if cfg.qk_norm else None   # one gain (D,) shared by the heads
        self.k_norm = nn.RMSNorm(D, eps=1e-6) if cfg.qk_norm else None
        trained = max(2, cfg.max_position or cfg.block_size)
        self.logn_length = trained if cfg.logn_scaling else 0
        self.ssmax = nn.Parameter(ssmax_init(cfg.n_head, trained)) if cfg.ssmax else None   # s_h: (H,)
        self.c_attn = nn.Linear(cfg.n_embd, cfg.n_embd + 2 * self.n_kv_head * D, bias=cfg.bias)   # q, k, v
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = cfg.dropout

    def forward(self, x, pe, plan):
        B, T, C = x.shape
        pos, cache, D, H, Hkv = plan.q_pos, plan.cache, C // self.n_head, self.n_head, self.n_kv_head
        q, k, v = self.c_attn(x).view(B, T, -1, D).transpose(1, 2).split([H, Hkv, Hkv], 1)   # (B, H or Hkv, T, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.logn_length:
            q = q * logn_factor(pos, self.logn_length).to(q.dtype)[:, None]           # (T, 1) per query
        if self.ssmax is not None:
            q = q * ssmax_factor(self.ssmax, plan.key_counts).to(q.dtype)           # (H, T, 1) s_h log n
        plan.x = x                                                              # this layer's input (FoX's gates)
        q = pe.rotate(q, plan)
        if cache is None or not pe.length_dependent:
            k = pe.rotate(k, plan, key=True)
            if cache is not None:
                k, v = cache.write(self.layer, k, v)                            # (B, H, Tk, D)
        else:  # keys cached raw: rotate all of them at their positions, every call
            k, v = cache.write(self.layer, k, v)
            k = pe.rotate(k, plan, key=True)
        if H > Hkv:  # grouped-query attention: key/value head j serves query heads jG .. jG + G - 1, G = H / Hkv
            k, v = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)   # (B, H, Tk, D)
        if plan.kernel == "banded":  # its own logits on a band of near keys, the far ones by SDPA
            y = pe.attend_banded(q, k, v, plan, self.layer)
        elif pe.overrides("attend"):  # an encoding forming its own logits, by query blocks
            y = by_blocks(q, k, v, plan, lambda q, k, v, p: pe.attend(q, k, v, p, self.layer))
        else:
            y = attend(q, k, v, plan)
        y = y.transpose(1, 2).reshape(B, T, C)                                     # (B, T, C)
        return dropout(self.c_proj(y), self.dropout, self.training)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.gated = gated = cfg.mlp == "swiglu"     # c_fc's rows: the gate's, then the up projection's
        hidden = cfg.mlp_hidden or (256 * math.ceil(8 * cfg.n_embd // 3 / 256) if gated else 4 * cfg.n_embd)
        self.c_fc = nn.Linear(cfg.n_embd, (1 + gated) * hidden, bias=cfg.bias)
        self.c_proj, self.dropout = nn.Linear(hidden, cfg.n_embd, bias=cfg.bias), cfg.dropout

    def forward(self, x):
        h = self.c_fc(x)                                            # (B, T, hidden); gated: (B, T, 2 hidden)
        y = self.c_proj(F.silu(h.chunk(2, -1)[0]) * h.chunk(2, -1)[1] if self.gated else F.gelu(h))
        return dropout(y, self.dropout, self.training)


def norm(cfg):
    return (nn.RMSNorm(cfg.n_embd, eps=cfg.norm_eps) if cfg.norm == "rmsnorm"
            else nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps, bias=cfg.bias))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.ln_1 = norm(cfg)
        self.attn = (LinearSelfAttention if cfg.attention == "linear" else CausalSelfAttention)(cfg, layer)
        self.ln_2, self.mlp, self.parallel = norm(cfg), MLP(cfg), cfg.parallel_residual

    def forward(self, x, pe, plan):
        y = x + self.attn(self.ln_1(x), pe, plan)
        return y + self.mlp(self.ln_2(x if self.parallel else y))   # parallel: both branches read x


# ---- caches ---------------------------------------------------------------------------------

EMPTY = 2 ** 30   # the position of a slot not yet written: after every query, so the causal mask hides it


class KVCache(nn.Module):
    """gpt-fast's cache plus a ring for windows: keys and values in fixed slots addressed by a tensor of positions, so a
    decode step has one shape at every token (compiled once). It serves GPT.forward (a host counter, `length`) and the
    static step (Decoder). Position p's slot: p (period 0), or under a ring (a window, StreamingLLM's sinks,
    https://arxiv.org/abs/2309.17453) p below `sinks`, else sinks + (p - sinks) % period: bounded memory. slot_pos (S,)
    holds each slot's position (EMPTY: none yet) and slot_doc its document id, so masks, windows and biases come from true
    positions and cached decoding equals the windowed forward exactly (no re-numbering, unlike StreamingLLM). A call
    brings a ring at most `chunk` tokens (longer calls are split). `filled`: the leading slots a call attends (symbolic
    when compiled). k{i}, v{i}: (B, H, S, D) per layer; `states`: what encodings keep for a generation
    (state(owner, name, make)), dropped by reset()."""

    def __init__(self, n_layer, batch, n_head, head_dim, max_len, sinks, period, dtype, device, chunk=16):
        super().__init__()
        size = sinks + period if period else max_len + 1   # a slot never written: no recompiling at a full cache's end
        for name in (f"{kv}{i}" for i in range(n_layer) for kv in "kv"):
            self.register_buffer(name, torch.zeros(batch, n_head, size, head_dim, dtype=dtype, device=device), persistent=False)
        self.register_buffer("slot_pos", torch.full((size,), EMPTY, dtype=torch.long, device=device), persistent=False)
        self.register_buffer("slot_doc", torch.zeros(size, dtype=torch.long, device=device), persistent=False)
        self.max_len, self.n_positions = float("inf") if period else max_len, max_len   # a ring: any position
        self.sinks, self.period, self.size, self.chunk = sinks, period, size, chunk
        self.slot, self.filled, self.length, self.states = None, size, 0, {}

    def state(self, owner, name, make):
        """What an encoding keeps for this generation, made by make() on first use: a buffer (training/aot.py)."""
        key = (id(owner), name)
        if key not in self.states:
            value = make()   # first: make() may keep states of its own
            self.states[key] = f"state{len(self.states)}"
            self.register_buffer(self.states[key], value, persistent=False)
        return getattr(self, self.states[key])

    def drop_states(self):
        for name in self.states.values():
            delattr(self, name)
        self.states = {}

    def begin(self, pos, doc=None):
        """Place this call's positions pos (T,) in their slots, and its document ids doc (T,) if given."""
        s, n = self.sinks, self.period
        self.slot = pos if not n else pos % n if not s else torch.where(pos < s, pos, s + (pos - s) % n)
        self.slot_pos.index_copy_(0, self.slot, pos)
        if doc is not None:
            self.slot_doc.index_copy_(0, self.slot, doc)

    def key_positions(self, T, of=None):  # or, given slot_doc, the attended keys' document ids
        of = self.slot_pos if of is None else of
        return of[:self.filled]

    def write(self, layer, k, v):
        """k, v (B, H, T, D) into this call's slots; returns the attended slots (B, H, S, D)."""
        ks, vs = getattr(self, f"k{layer}"), getattr(self, f"v{layer}")
        for held, new in ((ks, k), (vs, v)):   # cast where autocast made them differ (a step pays for every call)
            held.index_copy_(2, self.slot, new if new.dtype == held.dtype else new.to(held.dtype))
        return (ks, vs) if self.filled == ks.shape[2] else (ks[:, :, :self.filled], vs[:, :, :self.filled])

    def advance(self, T):
        self.length += T

    def reset(self):
        self.slot_pos.fill_(EMPTY)
        self.filled, self.length = self.size, 0
        self.drop_states()


# ---- the GPT --------------------------------------------------------------------------------

class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.schedule, encodings = build_layers(cfg)     # [Layer(encoding, window)] per layer; {name: encoding}
        self.pe = encodings.pop(cfg.pos_encoding)        # the main encoding
        self.pe_layers = nn.ModuleDict(encodings) if encodings else None   # a schedule's other encodings
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.h = nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layer)])
        self.ln_f = norm(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.kv_cache = None
        self.flex = {"error": None, "cpu": cfg.attention_kernel == "flex"}  # given up after a failure; its compiled functions
        own = {m for pe in self.encodings.values() for m in pe.modules()}  # encodings initialise their own parameters
        for m in self.modules():
            if m not in own:
                self._init_weights(m)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @property
    def encodings(self):
        """{name: encoding} of the layers, the main one (self.pe) first."""
        return {self.config.pos_encoding: self.pe, **(self.pe_layers or {})}

    @property
    def pos_name(self):
        """The encoding's name, or a per-layer schedule's pattern ('rope/w32,none')."""
        return pattern_label(self.schedule) if self.config.layer_encodings or self.config.layer_windows else self.pe.name

    @property
    def max_positions(self):
        """Positions every layer's encoding can represent (the fewest of them), or None: any."""
        limits = [pe.max_positions for pe in self.encodings.values() if pe.max_positions is not None]
        return min(limits) if limits else None

    @property
    def excluded_param_names(self):
        """Parameter names left out of the model size (GPT-2's wpe), as named in this model."""
        return [n if name == self.config.pos_encoding else n.replace("pe.", f"pe_layers.{name}.", 1)
                for name, pe in self.encodings.items() for n in pe.excluded_param_names]

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.embed_std if module.weight is self.wte.weight else 0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def get_num_params(self):
        """Parameters, without the ones the encoding excludes (GPT-2's position table)."""
        skip = set(self.excluded_param_names)
        return sum(p.numel() for n, p in self.named_parameters() if n not in skip)

    # ---- caches -------------------------------------------------------------------------------
    def new_cache(self, batch, max_len, dtype=None, ring=None):
        """A KVCache for positions 0 .. max_len - 1 (linear attention: its running sums); ring (None: where
        smaller): a shared window as a ring of sinks + window - 1 + chunk slots, else a slot per position."""
        cfg, p = self.config, self.wte.weight
        dtype, H, D = dtype or p.dtype, cfg.n_kv_head or cfg.n_head, cfg.n_embd // cfg.n_head
        if cfg.attention == "linear":
            return LinearAttentionCache(cfg.n_layer, batch, H, D, dtype, p.device)
        windows = {layer.window for layer in self.schedule}
        window, chunk = windows.pop() if len(windows) == 1 else 0, 16
        ring = bool(window) and (cfg.sinks + window - 1 + chunk < max_len if ring is None else ring)
        return KVCache(cfg.n_layer, batch, H, D, max_len, cfg.sinks, window - 1 + chunk if ring else 0, dtype, p.device, chunk)

    def setup_cache(self, batch, max_len, dtype=None):
        """The cache GPT.forward continues a sequence with (a window: a ring, whatever max_len)."""
        self.kv_cache = self.new_cache(batch, max_len, dtype, ring=True)
        return self.kv_cache

    @property
    def static_decoding(self):
        """Whether the static step applies: softmax attention, encodings needing no host work per token."""
        return self.config.attention != "linear" and not any(pe.length_dependent for pe in self.encodings.values())

    def reset_cache(self):
        if self.kv_cache is not None:
            self.kv_cache.reset()

    def clear_cache(self):
        self.kv_cache = None

    # ---- forward ------------------------------------------------------------------------------
    def forward(self, idx, targets=None, pos=None, doc=None, places=None):
        """idx (B, T) -> logits (B, T, vocab) and the loss if targets are given; with a cache, idx continues it.
        pos: (T,) training positions (position_sampling; restarting per document), None: from the cache
        offset. doc: (T,) document ids (kept with the keys in a cache): other documents' keys are hidden.
        places: (B, T) a task's places of the tokens in their numbers, read by the embed hook alone
        (Ctx.places): they may repeat, so the mask never reads them."""
        B, T = idx.shape
        cache = self.kv_cache
        if cache is not None and cache.period and T > cache.chunk:  # a ring takes at most `chunk` tokens a call
            cuts = [slice(s, s + cache.chunk) for s in range(0, T, cache.chunk)]
            logits = torch.cat([self(idx[:, c], doc=None if doc is None else doc[c],
                                     places=None if places is None else places[:, c])[0]
                                for c in cuts], 1)
        else:
            pos, end = self.positions(T, cache, pos, doc, idx.device)                # (T,), last + 1
            if cache is not None:
                cache.filled = min(end, getattr(cache, "size", end))
            doc = None if doc is None else doc.to(idx.device)
            logits = self.run(idx, pos, end, cache, doc, places)                   # (B, T, vocab)
            if cache is not None:
                cache.advance(end - cache.length)    # explicit positions may skip some: the next call starts past them
        loss = None if targets is None else F.cross_entropy(logits.float().flatten(0, 1), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def run(self, idx, pos, n_positions, cache=None, doc=None, places=None):
        """The tensor work of a forward (no host check): idx (B, T) at pos (T,), all positions in play
        below n_positions (a static generation's, fixed for its steps) -> logits (B, T, vocab)."""
        encodings = self.encodings
        if cache is not None:
            cache.begin(pos, doc)
        plans = self.plans(pos, cache, encodings, doc, n_positions, places)
        if cache is None and any(p.kernel == "blocks" and not p.pe.overrides("attend") for p in plans.values()) and (
                self.static_decoding and bool((pos.diff() > 0).all())):   # keys cacheable, positions in order
            return self.by_chunks(idx, pos, n_positions, doc, places)
        x = dropout(self.pe.embed(self.wte(idx), next(iter(plans.values()))), self.config.dropout, self.training)
        for block, layer in zip(self.h, self.schedule):
            x = block(x, encodings[layer.encoding], plans[layer])
        return self.lm_head(self.ln_f(x))                                          # (B, T, vocab)

    def by_chunks(self, idx, pos, n_positions, doc, places=None):
        """run() through a KV cache by chunks of query rows where blocks would make a bias per block and layer (FIRE's
        past L): each chunk's bias is made once, for all layers (they share the plan). Exact; O(H rows T) memory."""
        B, T = idx.shape
        rows, ys = min(ATTENTION_BLOCK, max(16, BLOCK_SCORES // (B * self.config.n_head * T))), []
        cache = self.new_cache(B, n_positions, ring=False)                         # a slot per position
        for a in range(0, T, rows):
            cache.filled = int(pos[min(a + rows, T) - 1]) + 1
            c = slice(a, a + rows)
            chunk_doc = None if doc is None else doc[c]
            chunk_places = None if places is None else places[:, c]
            ys.append(self.run(idx[:, c], pos[c], n_positions, cache, chunk_doc, chunk_places))
        return torch.cat(ys, 1)                                                     # (B, T, vocab)

    def positions(self, T, cache, pos, doc, device):
        """(T,) positions of this call and the last one + 1, checked on the host."""
        start = cache.length if cache is not None else 0
        if pos is not None and cache is not None and not (     # in order past the cache (training has no cache)
                isinstance(cache, KVCache) and cache.period == 0 and len(pos) > 0 and int(pos[0]) >= start
                and bool((pos.diff() > 0).all())):
            raise ValueError(f"explicit positions continue a KV cache in order, from position {start} on, without a "
                             f"window's ring; got {pos.tolist()[:8]}...: clear the cache or pass increasing positions")
        if doc is not None and self.config.attention == "linear":
            raise ValueError("document ids need softmax attention (linear attention sums every earlier key)")
        check_positions(pos, doc, T)
        end = start + T if pos is None else int(pos.max()) + 1
        limit = self.max_positions
        if limit is not None and end > limit:
            raise ValueError(f"the {self.pos_name} encoding knows {limit} positions, got a sequence reaching "
                             f"position {end}; crop the input or use an encoding without a limit")
        if cache is not None and end > cache.max_len:
            raise ValueError(f"KV cache holds {cache.max_len} positions, this call needs {end}; "
                             f"call setup_cache with a larger max_len")
        return (torch.arange(start, end, device=device) if pos is None else pos.to(device)), end

    def plans(self, pos, cache, encodings, doc=None, n_positions=0, places=None):
        """{Layer: AttentionPlan}: layers sharing (encoding, window) share one plan; the layers of an
        encoding share its score bias (every layer attends to the same key positions)."""
        cfg, plans, biases = self.config, {}, {}
        k_pos = cache.key_positions(len(pos)) if cache is not None else pos                  # (Tk,)
        k_doc = cache.key_positions(len(pos), cache.slot_doc) if cache is not None and doc is not None else None
        groups = shifted_groups(len(pos), cfg.n_head, cfg.s2_group, pos.device) if self.training and cfg.s2_group else None
        for layer in self.schedule:
            if layer in plans:
                continue
            plan = AttentionPlan(pos, k_pos, layer.window, cfg.sinks, causal=cache is None, doc=doc, k_doc=k_doc, cache=cache,
                                 groups=groups, places=places, n_positions=n_positions,
                                 pe=encodings[layer.encoding], bias=biases.get(layer.encoding),
                                 dropout=cfg.dropout if self.training else 0.0, flex=self.flex)
            biases.setdefault(layer.encoding, plan.bias)                         # (H, Tq, Tk) made once, or None
            plan.key_counts = plan.count_visible(ATTENTION_BLOCK) if cfg.ssmax else None
            plans[layer] = plan
        return plans

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW, decaying the transformer's matrices (dim >= 2) only: not biases and norms (nanoGPT) nor any
        parameter of the encoding (decay would pull a bias table towards "no position", not slopes)."""
        pe_params = {id(p) for pe in self.encodings.values() for p in pe.parameters()}
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [{"params": [p for p in params if (p.dim() >= 2 and id(p) not in pe_params) == decay], "weight_decay": wd}
                  for decay, wd in ((True, weight_decay), (False, 0.0))]
        # fused (torch >= 2.4 on CPU): one pass over every tensor, 0.7 ms vs 1.7 ms (benchmarks/cpu-2core-training-step.md)
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=device_type in ("cuda", "cpu"))

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, on_token=None, static=True, compile=False):
        """Continue idx (B, T) by max_new_tokens with the KV cache (Decoder: static step, compiled with
        compile=True; static=False: forward's). on_token(id) streams the first sequence's new tokens."""
        return Decoder(self, static, compile).generate(idx, max_new_tokens, temperature, top_k, generator, on_token)


# ---- generation -----------------------------------------------------------------------------
# The static step (gpt-fast's design): one KVCache for the generation, the step's position a (1,) device
# tensor advanced in place, the encodings' state in the cache, the step GPT.run itself, compiled whole with
# compile=True (one graph for every step). GPT.forward with the growing cache serves static=False and
# length_dependent encodings (dynamic NTK); `learned` re-encodes the last max_positions tokens past its table.


def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    """(B, vocab) logits -> (B, 1) sampled ids (nanoGPT's rule: temperature, top_k, softmax, multinomial)."""
    logits = logits / max(temperature, 1e-8)
    if top_k is not None and top_k < logits.size(-1):
        logits = logits.masked_fill(logits < torch.topk(logits, top_k).values[:, [-1]], -float("inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)


def decode_step(model, idx, pos, cache, n_slots):
    """Logits (B, vocab) of idx's last token at pos (T,) over a static cache's first n_slots slots (symbolic when compiled)."""
    cache.filled = n_slots
    return model.run(idx, pos, cache.n_positions, cache)[:, -1]


@functools.lru_cache(maxsize=None)
def compiled_step(config, dynamic):
    """decode_step compiled whole, its own code per model config (own_code), its wrapper in C++ without stride
    asserts: 1.19x tokens/s (benchmarks/decode_options.py, docs/speed.md)."""
    return torch.compile(own_code(decode_step), fullgraph=True, dynamic=dynamic,
                         options={"cpp_wrapper": True, "size_asserts": False})


class Decoder:
    """Generates from `model`: its static step where allowed (compile=True: by torch.compile; a class: its instance
    per generation, one shape, e.g. training/aot.py's AheadOfTime), else the reference step."""

    def __init__(self, model, static=True, compile=False):
        self.model, self.static = model, static and model.static_decoding
        self.compile, self.step, self.cache = compile if self.static else False, decode_step, None   # True/class/False
        self.compiled_steps, self.first_step_s = 0, 0.0   # steps through the compiled graph; the first's seconds

    def open(self, batch, n_positions, device):
        m = self.model
        if not self.static:
            m.setup_cache(batch, n_positions)
            return
        c = self.cache
        if c is not None and (c.n_positions, c.slot_pos.device, c.k0.shape[0]) == (n_positions, device, batch):
            c.reset()  # the same shapes again: keep the buffers, and the graph compiled for them
        else:
            self.cache = m.new_cache(batch, n_positions)
        m.kv_cache = self.cache
        if self.compile:
            self.step = self.compile() if callable(self.compile) else compiled_step(repr(m.config), not self.cache.period)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)            # the next token's position
        self.positions = torch.arange(n_positions, device=device)

    @torch.inference_mode()
    def prefill(self, idx):
        """Logits (B, vocab) after the prompt idx (B, T)."""
        if not self.static:
            return self.model(idx)[0][:, -1]
        T = idx.shape[1]
        chunk = self.cache.chunk if self.cache.period else T
        for s in range(0, T, chunk):
            e = min(s + chunk, T)
            logits = decode_step(self.model, idx[:, s:e], self.positions[s:e], self.cache, min(e, self.cache.size))
        self.pos.fill_(T)
        return logits

    @torch.inference_mode()
    def next(self, tok):
        """Logits (B, vocab) after one more token tok (B, 1)."""
        if not self.static:
            return self.model(tok)[0][:, -1]
        cache = self.cache
        # the slots written so far; a compiled step under a ring: all of them, one shape
        n = cache.size if self.compile and (cache.period or callable(self.compile)) else min(cache.filled + 1, cache.size)
        t = time.perf_counter()
        logits = self.step(self.model, tok, self.pos, cache, n)
        if self.compile and not self.compiled_steps:  # the first compiled step compiles: timed, once
            self.first_step_s = time.perf_counter() - t
        self.compiled_steps += bool(self.compile)
        self.pos += 1
        return logits

    def close(self):
        """The model's cache and what the encodings kept in it for this generation are dropped."""
        self.model.clear_cache()
        if self.cache is not None:
            self.cache.drop_states()

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, on_token=None):
        """Continue idx (B, T) by max_new_tokens -> (B, T + max_new_tokens)."""
        m = self.model
        B, T = idx.shape
        limit, total = m.max_positions, T + max_new_tokens
        fits = total if limit is None else min(total, limit)   # positions the cache can cover
        out = torch.empty(B, total, dtype=idx.dtype, device=idx.device)
        out[:, :T] = idx
        self.open(B, fits, idx.device)
        try:
            cached = min(T, fits)
            logits = self.prefill(idx[:, -fits:])
            for t in range(T, total):
                nxt = sample_next(logits, temperature, top_k, generator)     # (B, 1)
                out[:, t:t + 1] = nxt
                if on_token is not None:
                    on_token(nxt[0, 0].item())
                if t == total - 1:
                    break
                if cached < fits:
                    logits, cached = self.next(nxt), cached + 1
                else:  # the text outgrew the encoding's positions: re-encode the last `limit` tokens
                    self.close()
                    logits = m(out[:, t + 1 - limit:t + 1])[0][:, -1]
        finally:
            self.close()
        return out
