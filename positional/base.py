"""The interface every positional encoding implements.

An encoding can act in three places of a GPT, and each hook defaults to "do nothing":

  embed(pos)                 -> (T, C) added to the token embeddings, or None
  rotate(x, pos, is_key)     -> x transformed, for queries and keys: (B, H, T, D) -> (B, H, T, D)
  score_bias(h, q, k)        -> additive attention logits, or None: an elementwise formula over
                             broadcastable integer tensors (head h, query position q, key position
                             k), backed by small per-head / per-distance tables, so one formula
                             serves a dense call (h (H,1,1), q (Tq,1), k (1,Tk): dense_bias(q_pos, k_pos)
                             gives (H, Tq, Tk)), a query block, or a FlexAttention score_mod

and one escape hatch, for encodings whose scores are not "q.k plus a fixed bias" (Shaw,
Transformer-XL, ReRoPE, CoPE, FoX); it costs the fused SDPA kernel (an explicit softmax):

  attention_logits(q, k, ctx, layer) -> (B, H, Tq, Tk) logits (1/sqrt(D) included, mask
                             excluded; a new tensor, masked in place), or None for q.k
  attention_values(probs, ctx, layer) -> (B, H, Tq, D) added to probs @ v, or None (Shaw)
  layer_input(x, ctx, layer) sees each attention layer's input x (B, T, C) first (FoX's gates)

ctx (Ctx below) is the one per-forward object: the positions of the queries and keys, the
window and sinks, whether the keys are the queries' own positions (`causal`: no cache), the
document ids, the cache, and a scratch dict a layer's hooks share within that forward.
Everything an encoding keeps across the calls of a generation (Transformer-XL's projected
rows, FoX's running sums) lives in the cache, through ctx.cache.state(owner, name, make),
and is gone with it. Two more hooks: set_length(n) (on the host, once per forward and once for
a static generation: tables grown for n positions) and prepare(pos) (RoPE gathers its rows
once per forward at inference).

Notation (used in shape comments across the repo):
  B batch, T tokens in this call, H heads, D head dim, C model width,
  Tq = T query positions, Tk = cache length + T key positions.
  Distance d = q_pos - k_pos (distance(q_pos, k_pos)): d >= 0 for past keys, d < 0 for future ones.
  Visible keys (visible_keys, the one rule: mask, SSMax counts, CoPE, caches): 0 <= d, and with a
  window d < window unless the key is a sink (k_pos < sinks), and with documents the same document.

Positions are explicit LongTensors of *absolute* positions (restarting at each document when
documents are given), computed once in GPT.forward from the KV-cache offset. score_bias is
called once per forward pass and shared by all layers; it spans the full key length (Tk).

Settings: each encoding declares a small typed dataclass of its knobs next to its class
(`Settings`, a subclass of base.Settings; field names are the users' flat config keys), with
a check(cfg) that refuses bad values in one line: the one place a setting is validated
(constructors trust their arguments); positional.build() types and checks them.

Capabilities, read by model/train/sample code instead of encoding names:
  max_positions        None if any position works, else how many it can represent
  cache_rotated_keys   True: keys are cached after rotate(); False: cached raw and re-rotated
  excluded_param_names parameter names left out of the reported model size (GPT-2's wpe)
  needs_score_matrix   derived: the class overrides score_bias, attention_logits or
                       attention_values (linear attention refuses these encodings)
  supports_rope_scaling True if the frequency methods of rope_scaling/ apply (rotary encodings)
  scores_by_query_block True when attention_logits may be called on a block of the queries with
                       the keys up to its last one (ctx.rows says which rows of the forward)
  static_decoding      True when a decode step needs nothing from the host but the positions
  ordered_keys         True when attention_logits needs the keys in position order (CoPE)
"""
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class Settings:
    """No settings. An encoding's subclass adds typed fields named as the flat config keys
    (a field with metadata {"length": True} holds a length where 0 means "the length the
    model was trained at", see positional.pin_lengths)."""

    def check(self, cfg):
        """Raise ValueError with one actionable line if a value cannot work with cfg (GPTConfig)."""


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
    cache: object = None                # the generation's cache, or None
    rows: slice = field(default_factory=lambda: slice(None))   # the forward's query rows this ctx covers (a query block: a:b)
    scratch: dict = field(default_factory=dict)   # what one layer's hooks hand each other in this forward

    def visible(self):
        """(Tq, Tk) bool: the keys each query sees."""
        doc = self.doc
        k_doc = doc[:len(self.k_pos)] if self.k_doc is None and doc is not None else self.k_doc
        q_doc = None if doc is None else doc[self.rows]
        return visible_keys(self.q_pos, self.k_pos, self.window, self.sinks, q_doc, k_doc)


class PositionalEncoding(nn.Module):
    name = "none"
    Settings = Settings
    max_positions = None
    cache_rotated_keys = True
    excluded_param_names = ()
    needs_score_matrix = False
    supports_rope_scaling = False
    scores_by_query_block = False
    static_decoding = True
    ordered_keys = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "needs_score_matrix" not in cls.__dict__:
            cls.needs_score_matrix = (cls.score_bias is not PositionalEncoding.score_bias
                                      or cls.attention_logits is not PositionalEncoding.attention_logits
                                      or cls.attention_values is not PositionalEncoding.attention_values)

    @classmethod
    def from_config(cls, cfg, s):
        """Build from a GPTConfig (model shape) and s, an instance of cls.Settings (checked)."""
        return cls()

    def set_length(self, n_positions: int):
        """Called once per forward, on the host, with the number of positions in play
        (cache length + T). Strategies with cached tables grow them here."""

    def prepare(self, pos):
        pass

    def embed(self, pos):
        return None

    def layer_input(self, x, ctx, layer):
        pass

    def rotate(self, x, pos, is_key=False):
        return x

    def score_bias(self, h, q, k):
        return None

    def dense_bias(self, q_pos, k_pos):
        """(H, Tq, Tk) score_bias at every head, query and key, or None (for a dense caller)."""
        if type(self).score_bias is PositionalEncoding.score_bias:
            return None
        h = torch.arange(self.n_head, device=q_pos.device)[:, None, None]
        return self.score_bias(h, q_pos[:, None], k_pos[None, :])

    def attention_logits(self, q, k, ctx, layer):
        return None

    def attention_values(self, probs, ctx, layer):
        return None

    def method_label(self):
        """The length-extension method in use, for reports ('yarn x4', 'rerope w32'); '' for none."""
        return ""

    def extra_repr(self):
        return f"name={self.name!r}"


def distance(q_pos, k_pos):
    """(Tq, Tk) d = q_pos - k_pos: >= 0 for past keys (the repo's one convention)."""
    return q_pos[:, None] - k_pos[None, :]


def visible_keys(q_pos, k_pos, window=0, sinks=0, q_doc=None, k_doc=None):
    """(Tq, Tk) bool: the keys each query sees (causal, window, sinks, documents), the one rule."""
    d = distance(q_pos, k_pos)
    seen = d >= 0
    if window:
        seen &= (d < window) | (k_pos[None, :] < sinks)
    if q_doc is not None:
        seen &= q_doc[:, None] == k_doc[None, :]
    return seen
