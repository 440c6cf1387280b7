"""A GPT in one file (nanoGPT's spirit) with its KV cache (gpt-fast's), its encoding pluggable: the
hooks of positional/base.py are called unconditionally and no code here names an encoding. Positions
are absolute and explicit (GPT.forward derives them from the cache offset, or takes them), so
training, long evaluation and cached decoding share one path. Beside it: generate.py (decoding)
and attention/ (the plan, FlexAttention, the long-context engine, linear attention, schedules)."""
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from attention import long_cpu
from attention.flex import Flex, attention as flex_attention
from attention.linear import LinearAttentionCache, LinearSelfAttention
from attention.plan import forward_positions, make_plans
from attention.schedule import build_layers, pattern_label
from attention.states import EncodingStates
from attention.temperature import logn_factor, ssmax_factor, ssmax_init


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
    rope_scaling: str = ""          # RoPE length extension: a name of positional.SCALINGS, "": none
    pos_settings: dict = field(default_factory=dict)   # the encoding's and method's settings
    window: int = 0                 # > 0: each query sees only the last `window` keys
    sinks: int = 0                  # with a window: the first `sinks` positions stay visible
    attention: str = "softmax"      # "linear": elu+1 linear attention (attention/linear.py)
    max_position: int = 0           # positions trained with position_sampling; 0: block_size
    qk_norm: bool = False           # RMS-normalise q and k per head, before the positional hooks
    logn_scaling: bool = False      # q scaled by max(1, log n / log L) (attention/temperature.py)
    ssmax: bool = False             # SSMax: logits scaled by s_h log(n), n the keys a query sees
    layer_encodings: str = ""       # per-layer encodings, "rope,rope,none" (attention/schedule.py)
    layer_windows: str = ""         # per-layer windows, "32,0" (0: global); "": `window` everywhere
    norm: str = "layernorm"         # or "rmsnorm" (Llama): the blocks' and the final normalisation
    norm_eps: float = 1e-5
    mlp: str = "gelu"               # or "swiglu" (Llama): silu(gate) * up
    mlp_hidden: int = 0             # 0: 4C (gelu), or Llama's 8C/3 up to a multiple of 256 (swiglu)
    n_kv_head: int = 0              # key/value heads, shared by n_head / n_kv_head queries (GQA)
    tie_embeddings: bool = True     # lm_head shares wte's weight
    embed_std: float = 0.02         # wte's initial std (GPT-2's); 1.0 lets MQAR's lookup form
    parallel_residual: bool = False   # GPT-NeoX: x + attn(ln_1(x)) + mlp(ln_2(x))
    attention_kernel: str = ""      # "flex": biases by FlexAttention at evaluation on CPU too
    s2_group: int = 0               # > 0: LongLoRA's S²-Attn in training, groups of this many


# ---- attention ------------------------------------------------------------------------------
# Every layer calls attend(q, k, v, plan, layer) with the kernel its plan chose (attention/plan.py
# lists them). Tensor contract: q (B, H, Tq, D), k and v (B, H, Tk, D) -> (B, H, Tq, D).

def explicit_attention(q, k, v, mask, dropout=0.0, training=False, causal=False):
    """softmax(q k^T / sqrt(D) + mask) v written out, the bias added in place and broadcast over
    the batch (no (B, H, Tq, Tk) copy of it). causal: queries and keys at the same positions, so
    keys past a query block's last row are left out (causal_blocks). mask: (H, Tq, Tk) additive."""
    D, Tk = q.shape[-1], k.shape[2]
    ys = []
    for a, b in long_cpu.causal_blocks(q.shape[2]) if causal else [(0, q.shape[2])]:
        end = b if causal else Tk
        scaled = q[:, :, a:b] * (1.0 / math.sqrt(D))
        scores = scaled @ k[:, :, :end].transpose(-1, -2)                  # (B, H, b - a, end)
        scores += mask[..., a:b, :end].to(q.dtype)
        p = F.dropout(torch.softmax(scores.float(), dim=-1).to(v.dtype), dropout, training)
        ys.append(p @ v[:, :, :end])                                        # (B, H, b - a, D)
    return torch.cat(ys, dim=2) if len(ys) > 1 else ys[0]


def own_attention(q, k, v, plan, layer):
    """The encoding's own attention (pe.attend), over own keys by causal blocks (long_cpu's); in
    training, by blocks of pe.recompute_rows queries where it has them, each block recomputed in
    its backward (checkpoint): no block's logits are kept, memory O(rows Tk), linear in T."""
    # a cache's queries (a decode step), or an encoding attending by blocks of its own: one call
    if not plan.causal or plan.pe.attends_by_blocks:
        return plan.pe.attend(q, k, v, plan, layer)
    T, rows = q.shape[2], plan.pe.recompute_rows if torch.is_grad_enabled() else 0
    blocks = long_cpu.row_blocks(T, rows) if rows else long_cpu.causal_blocks(T)
    ys = []
    for a, b in reversed(blocks):   # the most keys first: later scores fit there
        part = q[:, :, a:b], k[:, :, :b], v[:, :, :b], plan, layer, a, b
        y = checkpoint(own_block, *part, use_reentrant=False) if rows else own_block(*part)
        ys.append(y)                                                            # (B, H, b - a, D)
    return torch.cat(ys[::-1], dim=2)                                           # (B, H, Tq, D)


def own_block(q, k, v, plan, layer, a, b):
    """pe.attend of the queries a:b over the keys up to b, the block's plan (its (b - a, b) mask)
    made here, so that a recomputed block keeps nothing of it until its backward."""
    return plan.pe.attend(q, k, v, plan.block(a, b), layer)


def attend(q, k, v, plan, layer=0):
    """Attention of q over k, v with the kernel the plan chose."""
    kernel, dropout = plan.kernel, plan.dropout
    if kernel == "causal":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
    if kernel == "flex":
        return flex_attention(q, k, v, plan, layer)
    if kernel in long_cpu.KERNELS:
        return long_cpu.attend(q, k, v, plan, layer, attend)
    if kernel == "own":
        return own_attention(q, k, v, plan, layer)
    if kernel == "explicit":
        return explicit_attention(q, k, v, plan.mask, dropout, dropout > 0, plan.causal)
    mask = plan.sdpa_mask(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


# ---- blocks ---------------------------------------------------------------------------------

def dropout(x, p, training):
    """F.dropout, not called where it does nothing (p = 0 or eval): a decode step pays per call."""
    return F.dropout(x, p, True) if training and p > 0 else x


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.n_head = cfg.n_head
        self.n_kv_head = cfg.n_kv_head or cfg.n_head
        self.layer = layer
        D = cfg.n_embd // cfg.n_head
        self.q_norm = nn.RMSNorm(D, eps=1e-6) if cfg.qk_norm else None   # a gain (D,) for all heads
        self.k_norm = nn.RMSNorm(D, eps=1e-6) if cfg.qk_norm else None
        trained = max(2, cfg.max_position or cfg.block_size)
        self.logn_length = trained if cfg.logn_scaling else 0
        self.ssmax = nn.Parameter(ssmax_init(cfg.n_head, trained)) if cfg.ssmax else None   # (H,)
        self.c_attn = nn.Linear(cfg.n_embd, cfg.n_embd + 2 * self.n_kv_head * D, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = cfg.dropout

    def forward(self, x, pe, plan):
        B, T, C = x.shape
        pos, cache = plan.q_pos, plan.cache
        H, Hkv = self.n_head, self.n_kv_head
        D = C // H
        qkv = self.c_attn(x).view(B, T, -1, D).transpose(1, 2)
        q, k, v = qkv.split([H, Hkv, Hkv], 1)                          # (B, H or Hkv, T, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.logn_length:
            q = q * logn_factor(pos, self.logn_length).to(q.dtype)[:, None]      # (T, 1) per query
        if self.ssmax is not None:
            q = q * ssmax_factor(self.ssmax, plan.key_counts).to(q.dtype)      # (H, T, 1) s_h log n
        pe.read_input(x, plan, self.layer)
        q = pe.rotate(q, plan)
        if cache is None or not pe.length_dependent:
            k = pe.rotate(k, plan, key=True)
            if cache is not None:
                k, v = cache.write(self.layer, k, v)                         # (B, H, Tk, D)
        else:  # keys cached raw: rotate all of them at their positions, every call
            k, v = cache.write(self.layer, k, v)
            k = pe.rotate(k, plan, key=True)
        if H > Hkv:  # grouped-query attention: key/value head j serves query heads jG .. jG + G - 1
            k = k.repeat_interleave(H // Hkv, dim=1)                         # (B, H, Tk, D)
            v = v.repeat_interleave(H // Hkv, dim=1)
        y = attend(q, k, v, plan, self.layer)
        y = y.transpose(1, 2).reshape(B, T, C)                               # (B, T, C)
        return dropout(self.c_proj(y), self.dropout, self.training)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.gated = gated = cfg.mlp == "swiglu"     # c_fc's rows: the gate's, then the up one's
        llama = 256 * math.ceil(8 * cfg.n_embd // 3 / 256)                 # 8C/3, a multiple of 256
        hidden = cfg.mlp_hidden or (llama if gated else 4 * cfg.n_embd)
        self.c_fc = nn.Linear(cfg.n_embd, (1 + gated) * hidden, bias=cfg.bias)
        self.c_proj = nn.Linear(hidden, cfg.n_embd, bias=cfg.bias)
        self.dropout = cfg.dropout

    def forward(self, x):
        h = self.c_fc(x)                                  # (B, T, hidden); gated: (B, T, 2 hidden)
        if self.gated:
            gate, up = h.chunk(2, -1)
            y = self.c_proj(F.silu(gate) * up)
        else:
            y = self.c_proj(F.gelu(h))
        return dropout(y, self.dropout, self.training)


def norm(cfg):
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.n_embd, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.n_embd, eps=cfg.norm_eps, bias=cfg.bias)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.ln_1 = norm(cfg)
        attention = LinearSelfAttention if cfg.attention == "linear" else CausalSelfAttention
        self.attn = attention(cfg, layer)
        self.ln_2 = norm(cfg)
        self.mlp = MLP(cfg)
        self.parallel = cfg.parallel_residual

    def forward(self, x, pe, plan):
        y = x + self.attn(self.ln_1(x), pe, plan)
        return y + self.mlp(self.ln_2(x if self.parallel else y))   # parallel: both branches read x


# ---- the KV cache ---------------------------------------------------------------------------

EMPTY = 2 ** 30   # the position of a slot not yet written: after every query, so the mask hides it


class KVCache(EncodingStates):
    """gpt-fast's cache plus a ring for windows: keys and values in fixed slots addressed by a
    tensor of positions, so a decode step has one shape at every token (compiled once). Position p's
    slot: p, or under a ring (a window, StreamingLLM's sinks, https://arxiv.org/abs/2309.17453) p
    below `sinks`, else sinks + (p - sinks) % period. slot_pos and slot_doc (S,) hold each slot's
    position (EMPTY: none yet) and document, so masks, windows and biases come from true positions
    and cached decoding equals the windowed forward exactly (no re-numbering, unlike StreamingLLM).
    A call brings a ring at most `chunk` tokens. k{i}, v{i}: (B, H, S, D) per layer; `states`: what
    encodings keep for a generation (state()), dropped by reset(). `length`: GPT.forward's count."""

    def __init__(self, n_layer, batch, n_head, head_dim, max_len, sinks, period, dtype, device,
                 chunk=16):
        super().__init__()
        size = sinks + period if period else max_len + 1   # one slot never written: no recompiling
        shape = (batch, n_head, size, head_dim)
        for name in (f"{kv}{i}" for i in range(n_layer) for kv in "kv"):
            buffer = torch.zeros(shape, dtype=dtype, device=device)
            self.register_buffer(name, buffer, persistent=False)
        slot_pos = torch.full((size,), EMPTY, dtype=torch.long, device=device)
        self.register_buffer("slot_pos", slot_pos, persistent=False)
        slot_doc = torch.zeros(size, dtype=torch.long, device=device)
        self.register_buffer("slot_doc", slot_doc, persistent=False)
        self.max_len = float("inf") if period else max_len   # a ring: any position
        self.n_positions = max_len
        self.sinks, self.period, self.size, self.chunk = sinks, period, size, chunk
        self.slot = None                # this call's slots (T,)
        self.filled = size              # the leading slots this call attends
        self.length = 0

    def begin(self, pos, doc=None, slots=None):
        """Place this call's positions pos (T,), increasing, in their slots, and its document ids
        doc (T,) if given. The call attends the leading `slots` slots (a static step's count,
        symbolic when compiled), by default those up to its last position."""
        s, n = self.sinks, self.period
        if not n:
            self.slot = pos
        else:
            self.slot = pos % n if not s else torch.where(pos < s, pos, s + (pos - s) % n)
        self.slot_pos.index_copy_(0, self.slot, pos)
        if doc is not None:
            self.slot_doc.index_copy_(0, self.slot, doc)
        self.filled = min(int(pos[-1]) + 1, self.size) if slots is None else slots

    def key_positions(self, T, of=None):  # or, given slot_doc, the attended keys' document ids
        of = self.slot_pos if of is None else of
        return of[:self.filled]

    def write(self, layer, k, v):
        """k, v (B, H, T, D) into this call's slots; returns the attended slots (B, H, S, D)."""
        ks, vs = getattr(self, f"k{layer}"), getattr(self, f"v{layer}")
        for held, new in ((ks, k), (vs, v)):   # cast where they differ (a step pays for every call)
            held.index_copy_(2, self.slot, new if new.dtype == held.dtype else new.to(held.dtype))
        if self.filled == ks.shape[2]:
            return ks, vs
        return ks[:, :, :self.filled], vs[:, :, :self.filled]

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
        self.schedule, encodings = build_layers(cfg)     # [Layer(encoding, window)]; {name: pe}
        self.pe = encodings.pop(cfg.pos_encoding)        # the main encoding
        self.pe_layers = nn.ModuleDict(encodings) if encodings else None   # a schedule's others
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.h = nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layer)])
        self.ln_f = norm(cfg)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.kv_cache = None
        self.flex = Flex.of(cfg, self.encodings.values())   # probed at the first plan taking it
        own = {m for pe in self.encodings.values() for m in pe.modules()}  # initialised by the pe
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
        if self.config.layer_encodings or self.config.layer_windows:
            return pattern_label(self.schedule)
        return self.pe.name

    @property
    def max_positions(self):
        """Positions every layer's encoding can represent (the fewest of them), or None: any."""
        limits = [pe.max_positions for pe in self.encodings.values()]
        limits = [n for n in limits if n is not None]
        return min(limits) if limits else None

    @property
    def excluded_param_names(self):
        """Parameter names left out of the model size (GPT-2's wpe), as named in this model."""
        names = []
        for name, pe in self.encodings.items():
            main = name == self.config.pos_encoding
            names += [n if main else n.replace("pe.", f"pe_layers.{name}.", 1)
                      for n in pe.excluded_param_names]
        return names

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            std = self.config.embed_std if module.weight is self.wte.weight else 0.02
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def get_num_params(self):
        """Parameters, without the ones the encoding excludes (GPT-2's position table)."""
        skip = set(self.excluded_param_names)
        return sum(p.numel() for n, p in self.named_parameters() if n not in skip)

    # ---- caches -------------------------------------------------------------------------------
    def new_cache(self, batch, max_len, dtype=None, ring=None):
        """A KVCache for positions 0 .. max_len - 1 (linear attention: its running sums); ring
        (None: where smaller): a shared window as a ring of sinks + window - 1 + chunk slots, else a
        slot per position. dtype (None): the compute dtype, autocast's where it is on."""
        cfg, p = self.config, self.wte.weight
        H, D = cfg.n_kv_head or cfg.n_head, cfg.n_embd // cfg.n_head
        if cfg.attention == "linear":
            return LinearAttentionCache(cfg.n_layer, batch, H, D, dtype or p.dtype, p.device)
        if dtype is None and torch.is_autocast_enabled(p.device.type):
            dtype = torch.get_autocast_dtype(p.device.type)
        windows = {layer.window for layer in self.schedule}
        window = windows.pop() if len(windows) == 1 else 0
        chunk = 16
        if ring is None:
            ring = cfg.sinks + window - 1 + chunk < max_len
        period = window - 1 + chunk if window and ring else 0
        return KVCache(cfg.n_layer, batch, H, D, max_len, cfg.sinks, period, dtype or p.dtype,
                       p.device, chunk)

    def setup_cache(self, batch, max_len, dtype=None):
        """The cache GPT.forward continues a sequence with (a window: a ring, whatever max_len)."""
        self.kv_cache = self.new_cache(batch, max_len, dtype, ring=True)
        return self.kv_cache

    @property
    def static_decoding(self):
        """Whether the static step applies: softmax attention, no host work per token."""
        length_dependent = any(pe.length_dependent for pe in self.encodings.values())
        return self.config.attention != "linear" and not length_dependent

    def reset_cache(self):
        if self.kv_cache is not None:
            self.kv_cache.reset()

    def clear_cache(self):
        self.kv_cache = None

    # ---- forward ------------------------------------------------------------------------------
    def forward(self, idx, targets=None, pos=None, doc=None, places=None):
        """idx (B, T) -> logits (B, T, vocab) and the loss if targets are given; with a cache, idx
        continues it. pos: (T,) positions (None: from the cache offset); doc: (T,) document ids
        (other documents are hidden); places: (B, T) a task's digit places, for embed (Ctx)."""
        B, T = idx.shape
        cache = self.kv_cache
        if cache is not None and cache.period and T > cache.chunk:  # a ring takes `chunk` a call
            parts = []
            for s in range(0, T, cache.chunk):
                cut = slice(s, s + cache.chunk)
                part_pos = None if pos is None else pos[cut]   # refused by positions() (B1)
                part_doc = None if doc is None else doc[cut]
                part_places = None if places is None else places[:, cut]
                parts.append(self(idx[:, cut], pos=part_pos, doc=part_doc, places=part_places)[0])
            logits = torch.cat(parts, 1)
        else:
            pos, end = forward_positions(self, T, cache, pos, doc, idx.device)      # (T,), last + 1
            doc = None if doc is None else doc.to(idx.device)
            logits = self.run(idx, pos, end, cache, doc, places=places)           # (B, T, vocab)
            if cache is not None:  # explicit positions may skip some: the next call is past them
                cache.advance(end - cache.length)
        if targets is None:
            return logits, None
        flat = logits.float().flatten(0, 1)
        return logits, F.cross_entropy(flat, targets.reshape(-1), ignore_index=-1)

    def run(self, idx, pos, n_positions, cache=None, doc=None, slots=None, places=None):
        """The tensor work of a forward (no host check): idx (B, T) at pos (T,), positions in play
        below n_positions -> logits (B, T, vocab). slots: the cache slots a static step attends."""
        encodings = self.encodings
        if cache is not None:
            cache.begin(pos, doc, slots)
        plans = self.plans(pos, cache, encodings, doc, n_positions, places)
        if cache is None and long_cpu.chunked(self, pos, plans):   # a bias a chunk, all layers
            return long_cpu.by_chunks(self, idx, pos, n_positions, doc, places)
        first = next(iter(plans.values()))
        x = dropout(self.pe.embed(self.wte(idx), first), self.config.dropout, self.training)
        for block, layer in zip(self.h, self.schedule):
            x = block(x, encodings[layer.encoding], plans[layer])
        return self.lm_head(self.ln_f(x))                                          # (B, T, vocab)

    def plans(self, pos, cache, encodings, doc=None, n_positions=0, places=None):
        """{Layer: AttentionPlan} of a forward (attention/plan.py)."""
        return make_plans(self, pos, cache, encodings, doc, n_positions, places)

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW, decaying the transformer's matrices (dim >= 2) only: not biases, norms (nanoGPT)
        or the encoding's parameters (decay would pull a bias table towards "no position")."""
        pe_params = {id(p) for pe in self.encodings.values() for p in pe.parameters()}
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p.dim() >= 2 and id(p) not in pe_params for p in params]
        groups = [{"params": [p for p, d in zip(params, decay) if d == on], "weight_decay": wd}
                  for on, wd in ((True, weight_decay), (False, 0.0))]
        # fused (torch >= 2.4 on CPU): one pass over every tensor, 0.7 ms vs 1.7 ms (benchmarks/)
        fused = device_type in ("cuda", "cpu")
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=fused)

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None,
                 on_token=None, static=True, compile=False):
        """Continue idx (B, T) by max_new_tokens: generate.Decoder's generate, kept for callers."""
        from generate import Decoder
        decoder = Decoder(self, static, compile)
        return decoder.generate(idx, max_new_tokens, temperature, top_k, generator, on_token)
