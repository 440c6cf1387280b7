"""A GPT in one file, in the spirit of nanoGPT, with a pluggable positional encoding.

The encoding (positional/) acts through three hooks, called unconditionally here:
    pe.embed(pos)               added to the token embeddings
    pe.rotate(x, pos, is_key)   applied to queries and keys
    pe.score_bias(q_pos, k_pos) added to the attention logits (once per forward, shared by layers)
(plus, for encodings whose scores are not q.k + bias, pe.attention_logits and
pe.attention_values on an explicit-softmax path; see positional/base.py).
There is no encoding-specific code in this file. attention="linear" swaps in
linear_attention.LinearSelfAttention, for encodings that never touch the score matrix.
A per-layer schedule (schedule.py: layer_encodings, layer_windows) gives layers their own
encoding and window; model.pe stays the main encoding, the others are in model.pe_layers.

Positions are absolute and explicit: GPT.forward derives them once from the KV cache
offset, so training, long evaluation and cached decoding share one code path.
"""
import inspect
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.nn import functional as F

from attention import AttentionPlan, FlexState, attend, attend_scores, causal_blocks
from cache import new_cache, static_cache
from decode import Decoder
from positional.linear_attention import LinearSelfAttention
from positional.schedule import build_layers, pattern_label
from positional.temperature import key_counts, logn_factor, ssmax_factor, ssmax_init


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
    attention: str = "softmax"      # "linear": elu+1 linear attention (linear_attention.py)
    max_position: int = 0           # positions seen in training with position_sampling (M or PoSE's target); 0: block_size
    qk_norm: bool = False           # RMS-normalise q and k per head (learned gain), before the positional transform
    logn_scaling: bool = False      # queries scaled by max(1, log n / log L) at position n (n = pos + 1, L trained length)
    ssmax: bool = False             # SSMax: logits scaled by s_h log(n), n the keys a query sees, s_h learned (temperature.py)
    layer_encodings: str = ""       # per-layer encodings, a comma pattern over the layers ("rope,rope,rope,none"); schedule.py
    layer_windows: str = ""         # per-layer windows, a comma pattern ("32,0"; 0 global); "" = `window` everywhere


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.n_head, self.n_embd, self.layer = cfg.n_head, cfg.n_embd, layer
        D = cfg.n_embd // cfg.n_head
        self.q_norm = nn.RMSNorm(D, eps=1e-6) if cfg.qk_norm else None   # one gain (D,) shared by the heads
        self.k_norm = nn.RMSNorm(D, eps=1e-6) if cfg.qk_norm else None
        trained = max(2, cfg.max_position or cfg.block_size)
        self.logn_length = trained if cfg.logn_scaling else 0
        self.ssmax = nn.Parameter(ssmax_init(cfg.n_head, trained)) if cfg.ssmax else None   # s_h: (H,)
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x, pe, plan, cache=None):
        B, T, C = x.shape
        pos, k_pos = plan.q_pos, plan.k_pos
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.logn_length:
            q = q * logn_factor(pos, self.logn_length).to(q.dtype)[:, None]           # (T, 1) per query
        if self.ssmax is not None:
            q = q * ssmax_factor(self.ssmax, plan.key_counts).to(q.dtype)           # (H, T, 1) s_h log n
        pe.layer_input(x, pos, self.layer)                                      # data-dependent encodings (FoX)
        q = pe.rotate(q, pos)
        if cache is None or pe.cache_rotated_keys:
            k = pe.rotate(k, pos, is_key=True)
            if cache is not None:
                k, v = cache.write(self.layer, k, v)                            # (B, H, Tk, D)
        else:  # keys cached raw: rotate all of them at their positions, every call
            k, v = cache.write(self.layer, k, v)
            k = pe.rotate(k, k_pos, is_key=True)
        y = self.attend_own_scores(q, k, v, pe, plan)
        if y is None:  # the kernel the plan chose: see attention.py
            y = attend(q, k, v, plan)
        y = y.transpose(1, 2).contiguous().view(B, T, C)                           # (B, T, C)
        return self.resid_dropout(self.c_proj(y))

    def attend_own_scores(self, q, k, v, pe, plan):
        """The explicit softmax over scores the encoding forms itself (attention_logits, plus its
        attention_values), or None if it forms none. Where it allows (scores_by_query_block) and
        keys are the queries' own positions, by query blocks over the keys up to each block's end."""
        T = q.shape[2]
        causal = pe.scores_by_query_block and plan.q_pos is plan.k_pos
        blocks = causal_blocks(T) if causal else [(0, T)]
        ys = []
        for a, b in blocks:
            p = plan if len(blocks) == 1 else plan.block(a, b, b)
            logits = pe.attention_logits(q[:, :, a:b], k[:, :, :len(p.k_pos)], p.q_pos, p.k_pos, self.layer)
            if logits is None:
                return None
            y, probs = attend_scores(logits, v[:, :, :len(p.k_pos)], p)               # (B, H, b - a, D)
            extra = pe.attention_values(probs, p.q_pos, p.k_pos, self.layer)
            ys.append(y if extra is None else y + extra)
        return torch.cat(ys, dim=2) if len(ys) > 1 else ys[0]                         # (B, H, T, D)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = (LinearSelfAttention if cfg.attention == "linear" else CausalSelfAttention)(cfg, layer)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x, pe, plan, cache):
        x = x + self.attn(self.ln_1(x), pe, plan, cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.schedule, encodings = build_layers(cfg)     # [Layer(encoding, window)] per layer; {name: encoding}
        self.pe = encodings.pop(cfg.pos_encoding)        # the main encoding
        self.pe_layers = nn.ModuleDict(encodings) if encodings else None   # a schedule's other encodings
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.kv_cache = None
        self.flex = FlexState()  # FlexAttention (CUDA) is given up for this model after a failure
        own = {m for pe in self.encodings.values() for m in pe.modules()}  # encodings initialise their own parameters
        for m in self.modules():
            if m not in own:
                self._init_weights(m)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    # ---- what the layers' encodings can do, together --------------------------------
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
    def extrapolates(self):
        return all(pe.extrapolates for pe in self.encodings.values())

    @property
    def excluded_param_names(self):
        """Parameter names left out of the model size (GPT-2's wpe), as named in this model."""
        return [n if name == self.config.pos_encoding else n.replace("pe.", f"pe_layers.{name}.", 1)
                for name, pe in self.encodings.items() for n in pe.excluded_param_names]

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self):
        """Parameters, without the ones the encoding excludes (GPT-2's position table)."""
        skip = set(self.excluded_param_names)
        return sum(p.numel() for n, p in self.named_parameters() if n not in skip)

    # ---- KV cache ------------------------------------------------------------------
    def setup_cache(self, batch, max_len, dtype=None):
        """A cache for max_len positions (cache.py); with a window or linear attention a
        bounded one, whose size does not depend on max_len."""
        p = self.wte.weight
        windows = [layer.window for layer in self.schedule]
        self.kv_cache = new_cache(self.config, batch, max_len, dtype or p.dtype, p.device, windows)
        return self.kv_cache

    @property
    def static_decoding(self):
        """Whether decode.py's static step applies: softmax attention and encodings that need no host work per token."""
        return self.config.attention != "linear" and all(pe.static_decoding for pe in self.encodings.values())

    def static_cache(self, batch, max_len, dtype=None):
        """A StaticKVCache (cache.py) for positions 0 .. max_len - 1, held by the caller (decode.Decoder)."""
        p = self.wte.weight
        ordered = any(pe.ordered_keys for pe in self.encodings.values())
        return static_cache(self.config, batch, max_len, dtype or p.dtype, p.device,
                            [layer.window for layer in self.schedule], ordered)

    def start_decoding(self, batch, n_positions):
        """Before a static generation of positions 0 .. n_positions - 1: the encodings' tables,
        once, and whatever fixed-shape state their decode steps keep (positional/base.py)."""
        p = self.wte.weight
        for pe in self.encodings.values():
            pe.set_length(n_positions)
            pe.start_decoding(batch, n_positions, p.device, p.dtype)

    def end_decoding(self):
        for pe in self.encodings.values():
            pe.end_decoding()

    def reset_cache(self):
        if self.kv_cache is not None:
            self.kv_cache.reset()

    def clear_cache(self):
        self.kv_cache = None

    # ---- forward -------------------------------------------------------------------
    def forward(self, idx, targets=None, pos=None):
        """idx: (B, T) token ids -> logits (B, T, vocab), and the loss if targets are given.
        With a cache set up, idx continues the cached sequence. pos: (T,) increasing training
        positions (position_sampling.py), on the host; None: contiguous from the cache offset."""
        B, T = idx.shape
        cache = self.kv_cache
        pos, end = self.positions(T, cache, pos, idx.device)                       # (T,), last + 1
        for pe in self.encodings.values():
            pe.set_length(end)
        logits = self.run(idx, pos, cache)                                          # (B, T, vocab)
        if cache is not None:
            cache.advance(T)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def run(self, idx, pos, cache=None):
        """The tensor work of a forward: idx (B, T) at positions pos (T,) -> logits (B, T, vocab).
        No host-side check and no table growth (forward does those, once per call; a static
        decode step, decode.py, does them once per generation), so it can be compiled whole."""
        encodings = self.encodings
        if cache is not None:
            cache.begin(pos)
        for pe in encodings.values():
            pe.prepare(pos)
        plans = self.plans(pos, cache, encodings)
        x = self.wte(idx)                                                           # (B, T, C)
        e = self.pe.embed(pos)
        if e is not None:
            x = x + e
        x = self.drop(x)
        for block, layer in zip(self.h, self.schedule):
            x = block(x, encodings[layer.encoding], plans[layer], cache)
        return self.lm_head(self.ln_f(x))                                          # (B, T, vocab)

    def positions(self, T, cache, pos, device):
        """(T,) positions of this call and the last one + 1, checked on the host."""
        start = cache.length if cache is not None else 0
        if pos is None:
            end = start + T
        else:
            if cache is not None:
                raise ValueError("explicit positions are for training, without a KV cache: clear the cache")
            if pos.shape != (T,) or pos.is_floating_point():
                raise ValueError(f"explicit positions must be a (T,) = ({T},) integer tensor, got {tuple(pos.shape)}")
            if pos[0] < 0 or not bool((pos[1:] > pos[:-1]).all()):
                raise ValueError("explicit positions must be >= 0 and increasing (position_sampling.py draws them so)")
            end = int(pos[-1]) + 1
        limit = self.max_positions
        if limit is not None and end > limit:
            raise ValueError(f"the {self.pos_name} encoding knows {limit} positions, got a sequence reaching "
                             f"position {end}; crop the input or use an encoding without a limit")
        if cache is not None and end > cache.max_len:
            raise ValueError(f"KV cache holds {cache.max_len} positions, this call needs {end}; "
                             f"call setup_cache with a larger max_len")
        return (torch.arange(start, end, device=device) if pos is None else pos.to(device)), end

    def plans(self, pos, cache, encodings):
        """{Layer: AttentionPlan}: layers sharing (encoding, window) share one plan, and one score bias;
        without a cache every layer's keys are pos, so the windows of an encoding share its bias too."""
        cfg, plans, biases = self.config, {}, {}
        for i, layer in enumerate(self.schedule):
            if layer in plans:
                continue
            k_pos = cache.key_positions(len(pos), i) if cache is not None else pos       # (Tk,)
            key = (layer.encoding, layer.window if cache is not None else 0)
            if key not in biases:
                biases[key] = encodings[layer.encoding].score_bias(pos, k_pos)            # (H, Tq, Tk) or None
            counts = key_counts(pos, k_pos, layer.window, cfg.sinks) if cfg.ssmax else None
            plans[layer] = AttentionPlan(pos, k_pos, biases[key], layer.window, cfg.sinks,
                                         cfg.dropout if self.training else 0.0, self.flex, key_counts=counts)
        return plans

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW. Weight decay falls on the matrices of the transformer (dim >= 2: token embedding,
        attention, MLP) and on nothing else: not on biases and norms (as in nanoGPT), and not on any
        parameter of the positional encoding, whatever its shape (tables, slopes, small MLPs of
        distances): decay would pull a bias table towards "no position" while leaving a vector of
        slopes alone. Unlike nanoGPT, this spares `learned`'s position table too."""
        pe_params = {id(p) for pe in self.encodings.values() for p in pe.parameters()}
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2 and id(p) not in pe_params]
        decay_ids = {id(p) for p in decay}
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": [p for p in params if id(p) not in decay_ids], "weight_decay": 0.0}]
        # The fused kernel (CUDA, and CPU since torch 2.4) updates every tensor in one pass: at nanoGPT's CPU
        # shape its step takes 0.7 ms against 1.7 ms for the per-tensor loop, torch's default on CPU
        # (benchmarks/cpu-2core-training-step.md). A resumed run keeps the implementation saved in its checkpoint.
        fused = device_type in ("cuda", "cpu") and "fused" in inspect.signature(torch.optim.AdamW).parameters
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **({"fused": True} if fused else {}))

    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, on_token=None,
                 static=True, compile=False):
        """Continue idx (B, T) by max_new_tokens with the KV cache (decode.py: the static step
        where the encodings allow it, compiled with compile=True; static=False: the reference
        step through forward). on_token(id) is called with each new token of the first
        sequence, for streaming. The cache is cleared on the way out, an exception included."""
        return Decoder(self, static, compile).generate(idx, max_new_tokens, temperature, top_k, generator, on_token)
