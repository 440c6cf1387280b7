"""A GPT in one file, in the spirit of nanoGPT, with a pluggable positional encoding.

The encoding (positional/) acts through three hooks, called unconditionally here:
    pe.embed(pos)               added to the token embeddings
    pe.rotate(x, pos, is_key)   applied to queries and keys
    pe.score_bias(q_pos, k_pos) added to the attention logits (once per forward, shared by layers)
(plus, for encodings whose scores are not q.k + bias, pe.attention_logits and
pe.attention_values on an explicit-softmax path; see positional/base.py).
There is no encoding-specific code in this file. attention="linear" swaps in
linear_attention.LinearSelfAttention, for encodings that never touch the score matrix.

Positions are absolute and explicit: GPT.forward derives them once from the KV cache
offset, so training, long evaluation and cached decoding share one code path.
"""
import inspect
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.nn import functional as F

import positional
from attention import attend, attend_scores
from linear_attention import LinearSelfAttention


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


class KVCache(nn.Module):
    """Static key/value buffers for all layers, set up explicitly by GPT.setup_cache.
    k, v: (L, B, H, max_len, D). Not part of the state_dict."""

    def __init__(self, n_layer, batch, n_head, max_len, head_dim, dtype, device):
        super().__init__()
        shape = (n_layer, batch, n_head, max_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.max_len, self.length = max_len, 0
        self.state = {}  # layer -> running sums, for attentions that summarise the past (linear)

    def key_positions(self, T):
        """(length + T,) positions of the keys once T new tokens are written."""
        return torch.arange(self.length + T, device=self.k.device)

    def write(self, layer, k, v):
        """Store k, v (B, H, T, D) after the cached ones; return all keys/values so far."""
        start, end = self.length, self.length + k.shape[2]
        self.k[layer, :, :, start:end] = k
        self.v[layer, :, :, start:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]   # (B, H, end, D)

    def advance(self, T):
        self.length += T

    def reset(self):
        self.length, self.state = 0, {}


class WindowKVCache(nn.Module):
    """A bounded cache for window attention with sinks (StreamingLLM, Xiao et al. 2023,
    https://arxiv.org/abs/2309.17453): it keeps the first `sinks` keys and the last
    window - 1 keys, all a later query can still see, so memory stays constant however
    long the generation runs. Same interface as KVCache.

    Positions: keys keep their original positions (key_positions returns them), and
    attention_mask applies the window from those. StreamingLLM instead re-numbers the
    positions inside the cache; we do not, because (1) cached decoding then equals the
    windowed forward of evaluate.py and training exactly, in every layer; (2) it works
    for every encoding, including absolute ones whose position is already inside the
    hidden states, and keeps keys cached after rotation; (3) for relative encodings the
    window's distances are identical under both schemes, only the sinks sit farther away.
    k, v: (L, B, H, sinks + window - 1, D); keys/values of this call are held until advance."""

    def __init__(self, n_layer, batch, n_head, window, sinks, head_dim, dtype, device):
        super().__init__()
        self.window, self.sinks, self.keep = window, sinks, sinks + window - 1
        shape = (n_layer, batch, n_head, self.keep, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("pos", torch.zeros(self.keep, dtype=torch.long, device=device), persistent=False)
        self.max_len, self.length, self.n_kept = float("inf"), 0, 0
        self.pending = [None] * n_layer

    def key_positions(self, T):
        """(n_kept + T,) original positions of the kept keys, then of the T new ones."""
        new = torch.arange(self.length, self.length + T, device=self.pos.device)
        return torch.cat([self.pos[:self.n_kept], new])

    def write(self, layer, k, v):
        """k, v: (B, H, T, D). Returns the kept keys/values followed by the new ones."""
        n = self.n_kept
        k = torch.cat([self.k[layer, :, :, :n], k], dim=2)                      # (B, H, n + T, D)
        v = torch.cat([self.v[layer, :, :, :n], v], dim=2)
        self.pending[layer] = (k, v)
        return k, v

    def advance(self, T):
        pos = self.key_positions(T)
        end = self.length + T
        keep = ((pos < self.sinks) | (pos > end - self.window)).nonzero().squeeze(1)   # sinks + last window - 1
        for layer, (k, v) in enumerate(self.pending):
            self.k[layer, :, :, :len(keep)] = k[:, :, keep]
            self.v[layer, :, :, :len(keep)] = v[:, :, keep]
        self.pos[:len(keep)] = pos[keep]
        self.n_kept, self.length = len(keep), end
        self.pending = [None] * len(self.pending)

    def reset(self):
        self.length = self.n_kept = 0


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


ATTENTIONS = ("softmax", "linear")


def build_encoding(cfg):
    """The positional encoding of cfg, checked with the rest of the model config: the one
    place a model config is validated (config.py and GPT both call it). One-line ValueError."""
    if cfg.n_head < 1 or cfg.n_embd % cfg.n_head:
        raise ValueError(f"n_embd={cfg.n_embd} is not divisible by n_head={cfg.n_head}; "
                         f"pick n_embd a multiple of n_head")
    if cfg.window < 0 or cfg.sinks < 0:
        raise ValueError(f"window and sinks must be >= 0 (0: off), got window={cfg.window}, sinks={cfg.sinks}")
    if cfg.sinks and not cfg.window:
        raise ValueError(f"sinks={cfg.sinks} needs a window (sinks stay visible past it): add --window=W")
    if cfg.attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, got {cfg.attention!r}")
    pe = positional.build(cfg)
    if cfg.attention == "linear":
        if pe.needs_score_matrix:
            ok = ", ".join(n for n, c in positional.REGISTRY.items() if not c.needs_score_matrix)
            raise ValueError(f"the {pe.name} encoding acts on the attention score matrix, which linear attention "
                             f"never forms; use one of {ok}, or attention=softmax")
        if not pe.cache_rotated_keys:
            raise ValueError(f"the {pe.name} encoding re-rotates cached keys, which linear attention's running "
                             f"sums cannot; drop its rope_scaling or use attention=softmax")
        if cfg.window:
            raise ValueError("linear attention has no window; set window=0 (or attention=softmax)")
    return pe


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig, layer: int):
        super().__init__()
        self.n_head, self.n_embd, self.layer = cfg.n_head, cfg.n_embd, layer
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.dropout = cfg.dropout

    def forward(self, x, pe, pos, k_pos, mask, cache=None):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        q = pe.rotate(q, pos)
        if cache is None or pe.cache_rotated_keys:
            k = pe.rotate(k, pos, is_key=True)
            if cache is not None:
                k, v = cache.write(self.layer, k, v)                            # (B, H, Tk, D)
        else:  # keys cached raw: rotate all of them at their positions, every call
            k, v = cache.write(self.layer, k, v)
            k = pe.rotate(k, k_pos, is_key=True)
        dropout = self.dropout if self.training else 0.0
        logits = pe.attention_logits(q, k, pos, k_pos, self.layer)
        if logits is not None:  # the encoding forms the scores itself: explicit softmax
            y, probs = attend_scores(logits, v, mask, dropout, self.training)   # (B, H, T, D)
            extra = pe.attention_values(probs, pos, k_pos, self.layer)
            if extra is not None:
                y = y + extra
        else:  # the kernel follows from the mask: see attention.py
            y = attend(q, k, v, mask, dropout, self.training)
        y = y.transpose(1, 2).contiguous().view(B, T, C)                           # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


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

    def forward(self, x, pe, pos, k_pos, mask, cache):
        x = x + self.attn(self.ln_1(x), pe, pos, k_pos, mask, cache)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.config = cfg
        self.pe = build_encoding(cfg)
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.h = nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.kv_cache = None
        own = set(self.pe.modules())  # the encoding initialises its own parameters
        for m in self.modules():
            if m not in own:
                self._init_weights(m)
        for name, p in self.named_parameters():  # GPT-2's scaled init of residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self):
        """Parameters, without the ones the encoding excludes (GPT-2's position table)."""
        skip = set(self.pe.excluded_param_names)
        return sum(p.numel() for n, p in self.named_parameters() if n not in skip)

    # ---- KV cache ------------------------------------------------------------------
    def setup_cache(self, batch, max_len, dtype=None):
        """A KV cache for max_len positions; with a window, a bounded one (max_len unused)."""
        cfg, p = self.config, self.wte.weight
        D, dtype = cfg.n_embd // cfg.n_head, dtype or p.dtype
        if cfg.window:
            self.kv_cache = WindowKVCache(cfg.n_layer, batch, cfg.n_head, cfg.window, cfg.sinks, D, dtype, p.device)
        else:
            self.kv_cache = KVCache(cfg.n_layer, batch, cfg.n_head, max_len, D, dtype, p.device)
        return self.kv_cache

    def reset_cache(self):
        if self.kv_cache is not None:
            self.kv_cache.reset()

    def clear_cache(self):
        self.kv_cache = None

    # ---- forward -------------------------------------------------------------------
    def forward(self, idx, targets=None):
        """idx: (B, T) token ids -> logits (B, T, vocab), and the loss if targets are given.
        With a cache set up, idx continues the cached sequence."""
        B, T = idx.shape
        cache = self.kv_cache
        start = cache.length if cache is not None else 0
        end = start + T
        if self.pe.max_positions is not None and end > self.pe.max_positions:
            raise ValueError(f"the {self.pe.name} encoding knows {self.pe.max_positions} positions, got a "
                             f"sequence reaching position {end}; crop the input or use an encoding without a limit")
        if cache is not None and end > cache.max_len:
            raise ValueError(f"KV cache holds {cache.max_len} positions, this call needs {end}; "
                             f"call setup_cache with a larger max_len")
        self.pe.set_length(end)
        pos = torch.arange(start, end, device=idx.device)                         # (T,)
        k_pos = cache.key_positions(T) if cache is not None else pos               # (Tk,)
        mask = attention_mask(self.pe.score_bias(pos, k_pos), pos, k_pos,
                              self.config.window, self.config.sinks)
        x = self.wte(idx)                                                           # (B, T, C)
        e = self.pe.embed(pos)
        if e is not None:
            x = x + e
        x = self.drop(x)
        for block in self.h:
            x = block(x, self.pe, pos, k_pos, mask, cache)
        if cache is not None:
            cache.advance(T)
        logits = self.lm_head(self.ln_f(x))                                        # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        """AdamW. Weight decay falls on the matrices of the transformer (dim >= 2: token embedding,
        attention, MLP) and on nothing else: not on biases and norms (as in nanoGPT), and not on any
        parameter of the positional encoding, whatever its shape (tables, slopes, small MLPs of
        distances): decay would pull a bias table towards "no position" while leaving a vector of
        slopes alone. Unlike nanoGPT, this spares `learned`'s position table too."""
        pe_params = {id(p) for p in self.pe.parameters()}
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2 and id(p) not in pe_params]
        decay_ids = {id(p) for p in decay}
        groups = [{"params": decay, "weight_decay": weight_decay},
                  {"params": [p for p in params if id(p) not in decay_ids], "weight_decay": 0.0}]
        fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **({"fused": True} if fused else {}))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None, on_token=None):
        """Continue idx (B, T) by max_new_tokens, with the KV cache. An encoding with a
        position table (max_positions) keeps the cache while the text fits the table and
        then re-encodes a sliding window of the last max_positions tokens at every step.
        on_token(id) is called with each new token of the first sequence, for streaming."""
        limit = self.pe.max_positions
        out, total = idx, idx.shape[1] + max_new_tokens
        cached = limit is None or total <= limit     # the whole run fits the encoding's positions
        if cached:
            self.setup_cache(idx.shape[0], total)
            logits, _ = self(idx)
        for i in range(max_new_tokens):
            if not cached:
                logits, _ = self(out[:, -limit:])
            logits = logits[:, -1, :] / max(temperature, 1e-8)
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)   # (B, 1)
            out = torch.cat((out, nxt), dim=1)
            if on_token is not None:
                on_token(nxt[0, 0].item())
            if cached and i < max_new_tokens - 1:
                logits, _ = self(nxt)
        self.clear_cache()
        return out
