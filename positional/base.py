"""The interface every positional encoding implements.

An encoding can act in four places of a GPT, and each hook defaults to "do nothing":

  embed(x, ctx)              -> the token embeddings x (B, T, C) with positions applied (x + table[q_pos])
  rotate(x, ctx, key=False)  -> queries or keys transformed, (B, H, T, D) -> (B, H, T, D): queries at
                             ctx.q_pos; keys at ctx.q_pos too (the new keys, before they are cached),
                             or at ctx.k_pos (every key, again at each call) when length_dependent
  score_bias(h, q, k)        -> additive attention logits, or None: an elementwise formula over
                             broadcastable head, query and key positions, so one formula serves a
                             dense call (dense_bias: (H, Tq, Tk)), a query block, or a score_mod
  attend(q, k, v, ctx, layer) -> (B, H, Tq, D), or None for softmax(q.k + bias) v: for encodings whose
                             scores are not "q.k plus a fixed bias" (OwnLogits: Shaw, Transformer-XL,
                             ReRoPE, CoPE, FoX, DeBERTa). It costs the fused SDPA kernel; the model may
                             call it on a causal block of queries (ctx.rows: which rows of the forward).
                             OwnLogits adds far(), where every key `band` or more behind a query takes
                             one form qa . ka + r_i (Shaw, DeBERTa, FoX, CoPE where far_holds): long
                             evaluations then form logits for the near band alone, SDPA's kernel the
                             rest (attend_banded); and one_query(), the same for one query with a cache
                             (a decode step): keys, values and a bias that SDPA's kernel takes.

ctx (Ctx below, its fields commented) is the one per-forward object. What an encoding keeps across
the calls of a generation lives in the cache (ctx.cache.state, ctx.kept) and is gone with it; a
forward writes nothing on the encoding (tests/test_encodings.py checks it).

Notation (used in shape comments across the repo):
  B batch, T tokens in this call, H heads, D head dim, C model width,
  Tq = T query positions, Tk = cache length + T key positions.
  Distance d = q_pos - k_pos (distance(q_pos, k_pos)): d >= 0 for past keys, d < 0 for future ones.
  Visible keys (sees, the one rule: mask, SSMax counts, CoPE, caches): 0 <= d, and with a
  window d < window unless the key is a sink (k_pos < sinks), and with documents the same document.

Positions are explicit LongTensors of *absolute* positions (restarting at each document),
computed once in GPT.forward from the KV-cache offset; biases span the full key length (Tk).

Settings: a typed dataclass per encoding (`Settings`, its fields the flat config keys, bounds by
setting()); its check(cfg) is the one place a setting is validated (constructors trust their arguments).

Capabilities, read by model/train/sample code instead of encoding names:
  max_positions        None if any position works, else how many it can represent
  excluded_param_names parameter names left out of the reported model size (GPT-2's wpe)
  needs_score_matrix   derived: the class overrides score_bias or attend (linear attention refuses it)
  length_dependent     the formula depends on the current length (dynamic NTK): keys are cached raw
                       and re-rotated at every call, and a decode step needs the host (no static step)
  relative_bias        score_bias depends on q - k alone: the model may read it from one vector of distances
  reads_places         embed reads ctx.places, the places of digits a task supplies (abacus, coupling)
"""
import dataclasses
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F


def setting(default, *, at_least=None, above=None, choices=(), why="", length=False):
    """A settings field whose bounds Settings.check enforces: >= at_least, > above, one of choices;
    `why` (what a boundary value means) goes into the error; length: 0 means the length the model
    was trained at (positional.pin_lengths)."""
    return field(default=default, metadata=dict(at_least=at_least, above=above, choices=choices, why=why,
                                                length=length))


@dataclass
class Settings:
    """No settings. An encoding's subclass adds typed fields named as the flat config keys."""

    def check(self, cfg):
        """Raise ValueError with one actionable line if a value cannot work with cfg (GPTConfig): here
        the bounds the fields declare (setting()); a subclass checks the rest after super().check(cfg)."""
        for f in dataclasses.fields(self):
            v, m = getattr(self, f.name), f.metadata
            why = f" ({m['why']})" if m.get("why") else ""
            if m.get("choices") and v not in m["choices"]:
                raise ValueError(f"{f.name} must be one of {', '.join(m['choices'])}, got {v!r}")
            if m.get("at_least") is not None and not v >= m["at_least"]:
                raise ValueError(f"{f.name} must be >= {m['at_least']}{why}, got {v}")
            if m.get("above") is not None and not v > m["above"]:
                raise ValueError(f"{f.name} must be > {m['above']}{why}, got {v}")


@dataclass(eq=False)
class Ctx:
    """One forward's positions and what its hooks share (model.AttentionPlan extends it)."""
    q_pos: torch.Tensor                 # (Tq,) absolute positions of the queries
    k_pos: torch.Tensor                 # (Tk,) of the keys (cached, then new)
    window: int = 0                     # > 0: a query sees keys less than `window` behind it...
    sinks: int = 0                      # ...and the first `sinks` positions
    causal: bool = False                # the keys are the queries' own positions, in order (no cache)
    doc: torch.Tensor = None            # (T,) document ids of the forward's tokens, or None
    k_doc: torch.Tensor = None          # (Tk,) the keys' ids with a cache (None: the keys are doc's own tokens)
    groups: torch.Tensor = None         # (H, T) S²-Attn's group ids in training (shifted_groups), or None
    places: torch.Tensor = None         # (B, T) each token's place in its number (a task's; abacus, coupling), or None
    cache: object = None                # the generation's cache, or None
    n_positions: int = 0                # positions in play (of the forward, or of a static generation); 0: from k_pos
    x: torch.Tensor = None              # (B, T, C) the input of the layer attending now (set by the model)
    rows: slice = field(default_factory=lambda: slice(None))   # the forward's query rows it covers (a block: a:b)
    scratch: dict = field(default_factory=dict)   # what hooks compute once per forward, for every layer
    mask: torch.Tensor = field(init=False, default=None)   # a plan's: None, (Tq, Tk) bool, or bias with -inf hidden
    unseen: torch.Tensor = field(init=False, default=None, repr=False)   # ~seen(), once for this object's layers

    def __post_init__(self):
        if not self.n_positions:  # a ctx made by hand (tests, plots): on the host, once
            self.n_positions = int(torch.cat([self.q_pos, self.k_pos]).max()) + 1

    def visible(self):
        """(Tq, Tk) bool: the keys each query sees (causal, window, sinks, documents); (H, Tq, Tk) with
        S²-Attn's groups."""
        seen = sees(self.q_pos[:, None], self.k_pos[None, :], self.window, self.sinks)
        if self.doc is not None:
            k_doc = self.doc[:len(self.k_pos)] if self.k_doc is None else self.k_doc
            seen &= self.doc[self.rows][:, None] == k_doc[None, :]
        g = self.groups
        return seen if g is None else seen & (g[:, self.rows, None] == g[:, None, :len(self.k_pos)])   # (H, Tq, Tk)

    def count_visible(self, block=1024):
        """(Tq,) keys each query sees (SSMax's n; (H, Tq) with S²-Attn's groups), float, by query blocks of
        `block` rows: no (Tq, Tk) mask at once at long lengths."""
        at = self.rows.start or 0
        parts = [Ctx(self.q_pos[a:a + block], self.k_pos, self.window, self.sinks, doc=self.doc, k_doc=self.k_doc,
                     groups=self.groups, n_positions=self.n_positions, rows=slice(at + a, at + a + block))
                 for a in range(0, len(self.q_pos), block)]
        return torch.cat([p.visible().sum(-1) for p in parts], -1).float()

    def softmax(self, scores, v):
        """softmax(scores, hidden keys masked) @ v -> (y (B, H, Tq, D), probs); scores a new tensor."""
        probs = torch.softmax(scores.masked_fill(~self.visible(), float("-inf")).float(), -1).to(v.dtype)
        return probs @ v, probs

    def kept(self, owner, name, make, dim=0):
        """What `owner` keeps in the cache for the positions in play: make(a, b) gives its rows a..b-1
        (along dim), made for n_positions at first and grown by doubling when a generation passes them."""
        t = self.cache.state(owner, name, lambda: make(0, self.n_positions))
        if t.shape[dim] < self.n_positions:
            more = make(t.shape[dim], max(self.n_positions, 2 * t.shape[dim]))
            t = torch.cat([t, more], dim)
            setattr(self.cache, self.cache.states[(id(owner), name)], t)
        return t

    def seen(self):
        """visible(), or the mask a plan made of it once for its layers."""
        return self.mask if self.mask is not None and self.mask.dtype == torch.bool else self.visible()

    def hidden(self):
        """~seen(): the keys a query does not see, made once for the layers of this ctx (a block's is its own)."""
        if self.unseen is None:
            self.unseen = ~self.seen()
        return self.unseen

    def once(self, key, make):
        """make() the first time `key` is asked in this forward (scratch), shared by the layers."""
        if key not in self.scratch:
            self.scratch[key] = make()
        return self.scratch[key]


class PositionalEncoding(nn.Module):
    name = "none"
    Settings = Settings
    max_positions = None
    excluded_param_names = ()
    length_dependent = False
    relative_bias = False
    reads_places = False
    needs_score_matrix = False

    @classmethod
    def from_config(cls, cfg, s):
        """Build from a GPTConfig (model shape) and s, an instance of cls.Settings (checked)."""
        return cls()

    @classmethod
    def overrides(cls, hook):
        """Whether the class implements `hook` (what needs_score_matrix and the model's paths read); OwnLogits' far too."""
        default = getattr(PositionalEncoding, hook, None) or getattr(OwnLogits, hook)
        return getattr(cls, hook, default) is not default

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.needs_score_matrix = cls.overrides("score_bias") or cls.overrides("attend")

    def embed(self, x, ctx):
        return x

    def rotate(self, x, ctx, key=False):
        return x

    def score_bias(self, h, q, k):
        return None

    def attend(self, q, k, v, ctx, layer):
        return None

    def dense_bias(self, q_pos, k_pos):
        """(H, Tq, Tk) score_bias at every head, query and key, or None (for a dense caller)."""
        if not self.overrides("score_bias"):
            return None
        h = torch.arange(self.n_head, device=q_pos.device)[:, None, None]
        return self.score_bias(h, q_pos[:, None], k_pos[None, :])

    def attend_by_distance(self, q, k, v, blocks):
        """Causal attention over consecutive positions, score_bias read by distance (relative_bias): with the keys
        in reverse order the bias of query row r and key j' depends on r + j' alone, so a block's (H, rows, keys)
        bias is a strided view of one vector per head (a Hankel matrix): no (H, Tq, Tk) tensor is made.
        blocks: query rows [a, b), each over the keys up to row b (SDPA's kernel with a mask skips none)."""
        n, T = max(b - a for a, b in blocks), q.shape[2]
        d = torch.arange(1 - n, T, device=q.device)                              # every distance, future ones first
        h = torch.arange(q.shape[1], device=q.device)[:, None]
        u = self.score_bias(h, (d + n)[None], torch.full_like(d, n)[None])        # (H, n + T - 1): q - k = d
        u = u.to(q.dtype).masked_fill(d < 0, float("-inf")).contiguous()
        ys = []
        for a, b in blocks:   # query r, reversed key j' (key b - 1 - j'): d = r - b + 1 + j', u's column n - b + r + j'
            bias = hankel(u, b - a, b, n - b + a)
            ys.append(F.scaled_dot_product_attention(q[:, :, a:b], k[:, :, :b].flip(2), v[:, :, :b].flip(2),
                                                     attn_mask=bias))                 # (B, H, b - a, D)
        return torch.cat(ys, dim=2)                                                  # (B, H, Tq, D)

    def method_label(self):
        """The length-extension method in use, for reports ('yarn x4', 'rerope w32'); '' for none."""
        return ""

    def extra_repr(self):
        return f"name={self.name!r}"


class OwnLogits(PositionalEncoding):
    """An encoding whose scores are not q.k plus a bias: logits(q, k, ctx, layer) -> (B, H, Tq, Tk),
    1/sqrt(D) included (plots and tests read them too), turned into attention by ctx.softmax, plus
    value_term(probs, ctx, layer) where the values carry positions too (Shaw's).

    band = W (optional, with far()): the logits of every key W or more behind a query take one form,
    qa_i . ka_j + r_i (far()), so that the model may attend by attend_banded at long lengths."""
    band = None

    def logits(self, q, k, ctx, layer):
        raise NotImplementedError

    def value_term(self, probs, ctx, layer):
        """What the positions add to the output (B, H, Tq, D) besides probs @ v, or None."""
        return None

    def far(self, q, k, v, ctx, layer):
        """(qa, ka, va, r) with logits(i, j) = qa_i . ka_j + r_i (scale included) and value va_j (value_term's part
        included) for every key j at least `band` behind query i: (B, H, Tq, D'), (B, H, Tk, D'), (B, H, Tk, D),
        (B, H, Tq); ctx.rows: the queries' rows in the forward (FoX's sums)."""
        raise NotImplementedError

    def far_holds(self, q, k, ctx, layer):
        """(B, H, Tq) whether every key `band` or more behind each query takes far()'s form, where the content
        decides it (CoPE), else None (always): q the queries of ctx.q_pos, k their band's keys (ctx.k_pos)."""
        return None

    def one_query(self, q, k, v, ctx, layer):
        """For one query with a cache (a decode step; ctx's rows then share its keys): (qa, ka, va, bias) with
        logits(q, k)_j = qa . ka_j + bias_j (scale included; bias (B, H, 1, Tk) or None) and the output
        sum_j p_j va_j (value_term's part included), so that attend() is SDPA's fused kernel; None: no such form."""
        return None

    def attend(self, q, k, v, ctx, layer):
        one = self.one_query(q, k, v, ctx, layer) if q.shape[2] == 1 and ctx.cache is not None else None
        if one is not None:
            qa, ka, va, bias = one
            bias = bias if bias is None or bias.dtype == qa.dtype else bias.to(qa.dtype)   # no call where it is already
            mask = ctx.seen() if bias is None else bias.masked_fill(ctx.hidden(), float("-inf"))
            return F.scaled_dot_product_attention(qa, ka, va, attn_mask=mask, scale=1.0)
        y, probs = ctx.softmax(self.logits(q, k, ctx, layer), v)
        t = self.value_term(probs, ctx, layer)
        return y if t is None else y + t

    def attend_banded(self, q, k, v, ctx, layer, rows=1024, near_rows=256):
        """Causal attention over consecutive positions (no cache, window, documents or gradients) with the logits
        formed only for the band of keys less than W = band behind each query (logits(), blocks of near_rows
        queries over near_rows + W - 1 keys), the far keys (j <= i - W) by SDPA's fused kernel on far()'s queries
        and keys, per block of `rows` queries: the keys before the block's, then a causal square. The softmaxes
        over the parts are joined by their log-sum-exps: O(T (near_rows + W)) logits, none (T, T)."""
        T = q.shape[2]
        W = min(self.band, T)
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu   # (out, log-sum-exp)
        out = []
        for a in range(0, T, rows):
            b = min(a + rows, T)
            y, lse, holds = self.near_band(q, k, v, layer, ctx, a, b, W, near_rows) if W else (None, None, None)
            c = max(a, W)   # the block's first query with far keys
            if c < b:
                blk = Ctx(ctx.q_pos[a:b], ctx.k_pos[:b - W], n_positions=ctx.n_positions, x=ctx.x, rows=slice(a, b),
                          scratch=ctx.scratch)
                qa, ka, va, r = self.far(q[:, :, a:b], k[:, :, :b - W], v[:, :, :b - W], blk, layer)
                qa, va = qa[:, :, c - a:], F.pad(va, (0, qa.shape[-1] - va.shape[-1]))   # as wide: the fused kernel
                yf, lf = flash(qa, ka[:, :, c - W:], va[:, :, c - W:], is_causal=True, scale=1.0)   # the square
                if c > W:   # the keys before the square, seen by every query of it
                    yf, lf = join(yf, lf, *flash(qa, ka[:, :, :c - W], va[:, :, :c - W], scale=1.0))
                yf, lf = yf[..., :v.shape[-1]], lf + r[:, :, c - a:]
                if y is None:
                    y, lse = yf, lf
                else:
                    y[:, :, c - a:], lse[:, :, c - a:] = join(y[:, :, c - a:], lse[:, :, c - a:], yf, lf)
            for s in range(c, b, 64) if holds is not None else ():   # rows whose far keys are not all far: exact
                e = min(s + 64, b)
                if not bool(holds[..., s - a:e - a].all()):
                    exact = Ctx(ctx.q_pos[s:e], ctx.k_pos[:e], n_positions=ctx.n_positions, x=ctx.x, rows=slice(s, e),
                                scratch=ctx.scratch)
                    y[:, :, s - a:e - a] = self.attend(q[:, :, s:e], k[:, :, :e], v[:, :, :e], exact, layer)
            out.append(y.to(v.dtype))
        return torch.cat(out, 2)                                                 # (B, H, T, D)

    def near_band(self, q, k, v, layer, ctx, a, b, W, near_rows):
        """(y, log-sum-exp, far_holds or None) of queries a:b over their keys less than W behind, by blocks of
        near_rows queries."""
        ys, lses, holds = [], [], []
        for s in range(a, b, near_rows):
            e, first = min(s + near_rows, b), max(0, s - W + 1)
            near = Ctx(ctx.q_pos[s:e], ctx.k_pos[first:e], n_positions=ctx.n_positions, x=ctx.x, rows=slice(s, e),
                       scratch=ctx.scratch)
            d = distance(near.q_pos, near.k_pos)
            logits = self.logits(q[:, :, s:e], k[:, :, first:e], near, layer).float()
            logits = logits.masked_fill((d < 0) | (d >= W), float("-inf"))        # (B, H, e - s, e - first)
            lse = logits.logsumexp(-1)
            probs = torch.exp(logits - lse[..., None]).to(v.dtype)
            y, t = probs @ v[:, :, first:e], self.value_term(probs, near, layer)
            ys.append(y if t is None else y + t)
            lses.append(lse)
            holds.append(self.far_holds(q[:, :, s:e], k[:, :, first:e], near, layer))
        return torch.cat(ys, 2).float(), torch.cat(lses, 2), None if holds[0] is None else torch.cat(holds, 2)


def join(y, lse, y2, lse2):
    """Softmax attention over two disjoint sets of keys, (B, H, T, D) outputs with their (B, H, T) log-sum-exps
    -> the attention over both, and its log-sum-exp."""
    m = torch.maximum(lse, lse2)
    w, w2 = torch.exp(lse - m)[..., None], torch.exp(lse2 - m)[..., None]
    return (y * w + y2 * w2) / (w + w2), m + torch.log(w + w2)[..., 0]

def distance(q_pos, k_pos):
    """(Tq, Tk) d = q_pos - k_pos: >= 0 for past keys (the repo's one convention)."""
    return q_pos[:, None] - k_pos[None, :]


def shifted_groups(n, n_head, group, device=None):
    """(H, n) group ids of S²-Attn, LongLoRA's shifted sparse attention (Chen et al., ICLR 2024,
    arXiv:2309.12307; docs/extrapolation.md): a query sees the earlier keys of its own group of G tokens,
    token t in group t // G in heads h < H // 2 and (t + G/2) // G in the others, shifted by half a group
    so that information flows between groups. The paper's Algorithm 1 rolls the shifted heads' tokens by
    -G/2 instead, so that its last group wraps around: the first G/2 tokens see the last G/2 (later) ones.
    Here no token is moved (the mask is the whole change) and those first G/2 tokens form a group of their own."""
    shift = (torch.arange(n_head, device=device) >= n_head // 2) * (group // 2)      # (H,) 0 or G/2
    return (torch.arange(n, device=device)[None, :] + shift[:, None]) // group      # (H, n)


def hankel(u, rows, cols, start=0):
    """(1, H, rows, cols) view of u (H, n) whose element [h, r, j] is u[h, start + r + j] (constant along the
    anti-diagonals): overlapping strides, no copy. SDPA's CPU kernel takes it as its mask."""
    return u.as_strided((1, u.shape[0], rows, cols), (0, u.stride(0), 1, 1), u.storage_offset() + start)


def check_positions(pos, doc, T):
    """One line of ValueError unless document ids doc and positions pos (None: not given) are (T,) integer
    tensors, the positions >= 0 and increasing within each document."""
    if doc is not None and (doc.shape != (T,) or doc.is_floating_point()):
        raise ValueError(f"document ids must be a (T,) = ({T},) integer tensor, got {tuple(doc.shape)}")
    if pos is None:
        return
    if pos.shape != (T,) or pos.is_floating_point():
        raise ValueError(f"explicit positions must be a (T,) = ({T},) integer tensor, got {tuple(pos.shape)}")
    rising = pos[1:] > pos[:-1]
    if doc is not None:  # a new document may start over
        rising |= doc[1:] != doc[:-1]
    if pos.min() < 0 or not bool(rising.all()):
        raise ValueError("explicit positions must be >= 0 and increasing (within each document)")


def sees(q, k, window=0, sinks=0):
    """Whether a query at position q sees the key at k (broadcastable tensors), the one rule: causal,
    and with a window less than `window` behind unless the key is a sink."""
    d = q - k
    seen = d >= 0
    return seen & ((d < window) | (k < sinks)) if window else seen
