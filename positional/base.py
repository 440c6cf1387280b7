"""The interface every positional encoding implements.

An encoding can act in these places of a GPT, and each hook defaults to "do nothing":

  embed(x, ctx)              -> the token embeddings x (B, T, C) with positions applied (x + table[q_pos])
  rotate(x, ctx, key=False)  -> queries or keys transformed, (B, H, T, D) -> (B, H, T, D): queries at
                             ctx.q_pos; keys at ctx.q_pos too (the new keys, before they are cached),
                             or at ctx.k_pos (every key, again at each call) when length_dependent
  score_bias(h, q, k)        -> additive attention logits, or None: an elementwise formula over
                             broadcastable head, query and key positions, so one formula serves a
                             dense call (dense_bias: (H, Tq, Tk)), a query block, or a score_mod
  attend(q, k, v, ctx, layer) -> (B, H, Tq, D), or None for softmax(q.k + bias) v: for encodings whose
                             scores are not "q.k plus a fixed bias" (OwnLogits: Shaw, Transformer-XL,
                             ReRoPE, CoPE, FoX, DeBERTa; PaTH; stick-breaking, whose weights are no softmax:
                             ctx.drop gives them the attention dropout). It costs the fused SDPA kernel; the model may
                             call it on a causal block of queries (ctx.rows: which rows of the forward).
                             OwnLogits adds far(), where every key `band` or more behind a query takes
                             one form qa . ka + r_i (Shaw, DeBERTa, FoX, CoPE where far_holds): long
                             evaluations then form logits for the near band alone, a fused kernel the
                             rest (attention/long_cpu.py); and one_query(), the same for one query with a
                             cache (a decode step): keys, values and a bias that SDPA's kernel takes;
                             and flex_form(), the same for every query of a forward: keys, values and a
                             bias read from small tables in FlexAttention's score_mod (attention/flex.py).
  read_input(x, ctx, layer)  -> None: what the encoding reads from the layer's input (B, T, C) before the
                             layer attends, kept in ctx's memo (ctx.once) for that layer (FoX's gates, PaTH's
                             Householder transforms)

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
  relative_bias        score_bias depends on q - k alone: the model may read it by distance
  attends_by_blocks    attend goes through any number of queries by blocks of its own in memory linear in T, a
                       block reading what the one before it made (PaTH's carried keys): the model hands it every
                       query of a forward at once (the long-context engine's kernel "own_blocks")
  reads_places         embed reads ctx.places, the places of digits a task supplies (abacus, coupling)
  flex_formed          attend is flex_form's (OwnLogits): the model may attend by FlexAttention
  recompute_rows       > 0: in training the model calls attend by blocks of this many query rows, each
                       recomputed in its backward (torch.utils.checkpoint), so that no block's logits outlive
                       it: memory O(rows Tk) for the logits, not O(Tq Tk) (CoPE's many (Tq, Tk) intermediates)
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


@dataclass(frozen=True, eq=False)
class Ctx:
    """One forward's positions, made once and never changed (attention/plan.py's AttentionPlan adds the
    kernel the model chose): positions, documents, visibility (window, sinks, causality, S²-Attn's
    groups), the cache, and `memo`, where the hooks keep what they compute once per forward (once())."""
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
    rows: slice = field(default_factory=lambda: slice(None))   # the forward's query rows it covers (a block: a:b)
    memo: dict = field(default_factory=dict)   # once(): what hooks compute once per forward, for every layer

    def __post_init__(self):
        if not self.n_positions:  # a ctx made by hand (tests, plots): on the host, once
            object.__setattr__(self, "n_positions", int(torch.cat([self.q_pos, self.k_pos]).max()) + 1)

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
        rows = [self.rows_of(a, a + block) for a in range(0, len(self.q_pos), block)]
        return torch.cat([p.visible().sum(-1) for p in rows], -1).float()

    def rows_of(self, a, b):
        """The Ctx of this ctx's queries a:b alone (bare, over the same keys), for their visibility."""
        at = self.rows.start or 0
        return Ctx(self.q_pos[a:b], self.k_pos, self.window, self.sinks, doc=self.doc, k_doc=self.k_doc,
                   groups=self.groups, n_positions=self.n_positions, rows=slice(at + a, at + min(b, len(self.q_pos))))

    def seen_rows(self, a, b):
        """seen() of this ctx's queries a:b alone, (b - a, Tk) or (H, b - a, Tk): no (Tq, Tk) mask made for it."""
        return self.rows_of(a, b).visible()

    def softmax(self, scores, v):
        """softmax(scores, hidden keys masked) @ v -> (y (B, H, Tq, D), probs); scores a new tensor."""
        probs = torch.softmax(scores.masked_fill(~self.visible(), float("-inf")).float(), -1).to(v.dtype)
        return probs @ v, probs

    def drop(self, weights):
        """Attention weights (B, H, Tq, Tk) an encoding formed without softmax() (stick-breaking's), with the
        forward's attention dropout: none on a bare Ctx (AttentionPlan applies its own)."""
        return weights

    def drops(self):
        """Whether drop() changes the weights (attention dropout in training): never on a bare Ctx."""
        return False

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
        """(Tq, Tk) bool, the keys each query sees: visible() (a plan: the mask it made once for its layers)."""
        return self.visible()

    def hidden(self):
        """~seen(): the keys a query does not see (a plan: made once for its layers)."""
        return ~self.seen()

    def once(self, key, make):
        """make() the first time `key` is asked in this forward (memo), shared by the layers."""
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]


class PositionalEncoding(nn.Module):
    name = "none"
    Settings = Settings
    max_positions = None
    excluded_param_names = ()
    length_dependent = False
    relative_bias = False
    reads_places = False
    attends_by_blocks = False
    needs_score_matrix = False
    recompute_rows = 0

    @classmethod
    def from_config(cls, cfg, s):
        """Build from a GPTConfig (model shape) and s, an instance of cls.Settings (checked)."""
        return cls()

    @classmethod
    def overrides(cls, hook):
        """Whether the class implements `hook` (what needs_score_matrix and the model's paths read);
        OwnLogits' far too."""
        default = getattr(PositionalEncoding, hook, None) or getattr(OwnLogits, hook)
        return getattr(cls, hook, default) is not default

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.needs_score_matrix = cls.overrides("score_bias") or cls.overrides("attend")

    @property
    def flex_formed(self):
        return False

    def embed(self, x, ctx):
        return x

    def rotate(self, x, ctx, key=False):
        return x

    def score_bias(self, h, q, k):
        return None

    def attend(self, q, k, v, ctx, layer):
        return None

    def read_input(self, x, ctx, layer):
        """What the encoding derives from the layer's input x (B, T, C) before the layer attends, kept in
        ctx's memo for that layer (ctx.once): FoX's gates. Called for every layer; by default nothing."""

    def dense_bias(self, q_pos, k_pos):
        """(H, Tq, Tk) score_bias at every head, query and key, or None (for a dense caller)."""
        if not self.overrides("score_bias"):
            return None
        h = torch.arange(self.n_head, device=q_pos.device)[:, None, None]
        return self.score_bias(h, q_pos[:, None], k_pos[None, :])

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
    qa_i . ka_j + r_i (far()), so that the model may attend by bands at long lengths
    (attention/long_cpu.py)."""
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

    def flex_form(self, q, k, v, ctx, layer):
        """(qa, ka, va, bias) with logits(q, k)_ij = qa_i . ka_j + bias(b, h, qi, ki, qp, kp) (scale included) and
        the output sum_j p_ij va_j, for every query and key of ctx (a forward, no cache): bias an elementwise formula
        of FlexAttention's batch, head, query and key indices qi, ki (tensors), positions qp(qi), kp(ki) computed
        where it needs them, reading tables no larger than (B, H, T, a few), each once where it needs a gradient
        (inductor's rule), or None for no bias."""
        raise NotImplementedError

    @property
    def flex_formed(self):
        """Whether flex_form gives this encoding's attention (choose_kernel reads it)."""
        return self.overrides("flex_form")

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
