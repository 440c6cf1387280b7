"""The interface every positional encoding implements.

An encoding can act in three places of a GPT, and each hook defaults to "do nothing":

  embed(pos)                 -> (T, C) added to the token embeddings, or None
  rotate(x, pos, is_key)     -> x transformed, for queries and keys: (B, H, T, D) -> (B, H, T, D)
  score_bias(q_pos, k_pos)   -> (H, Tq, Tk) additive attention logits, or None

and one escape hatch, for encodings whose scores are not "q.k plus a fixed bias":

  attention_logits(q, k, q_pos, k_pos, layer) -> (B, H, Tq, Tk) pre-softmax logits
                             (1/sqrt(D) included, mask excluded), or None for q.k; a new
                             tensor, which attention masks in place

Returning logits costs the fused SDPA kernel (an explicit softmax is used), so only
encodings that need it (ReRoPE, content-dependent relative terms) should. On that
explicit-softmax path the encoding may also add to the attention output:

  attention_values(probs, q_pos, k_pos, layer) -> (B, H, Tq, D) added to probs @ v, or None
                             (probs: (B, H, Tq, Tk) after softmax; Shaw's value term)

Before the layers of every forward, GPT.run tells each encoding the positions of the call,
through one more no-op hook:

  prepare(pos)               pos (T,): the query positions every layer of this forward will
                             use; an encoding may gather here, once, what each layer would
                             otherwise gather again (RoPE at inference: its rows at pos)

Encodings whose position signal is computed from the content (FoX's forget gates) see
each attention layer's input first, through one more no-op hook:

  layer_input(x, pos, layer)  x: (B, T, C), the layer's normalised input; called by every
                             softmax attention layer before attention_logits. Anything
                             the encoding keeps across calls (FoX's running sums for
                             cached decoding) it keys by absolute position, so it needs
                             nothing from the KV cache.

Static decoding (decode.py) brackets a whole generation with two more no-op hooks:

  start_decoding(batch, n_positions, device, dtype)
                             once, after set_length(n_positions), before the prompt: an encoding
                             allocates here the fixed-shape tensors its decode step reads or
                             writes in place (Transformer-XL's projected rows, FoX's running sums
                             by position), so the step itself needs nothing from the host
  end_decoding()             after the generation: back to the training/reference behaviour

Notation (used in shape comments across the repo):
  B batch, T tokens in this call, H heads, D head dim, C model width,
  Tq = T query positions, Tk = cache length + T key positions.

Positions are explicit LongTensors of *absolute* positions, computed once in
GPT.forward from the KV-cache offset. Strategies never call arange themselves, so a
KV cache that starts at any offset sees the right positions everywhere.

score_bias is called once per forward pass and shared by all layers. It must span the
full key length (Tk), never just the query length.

Settings: each encoding declares a small typed dataclass of its knobs next to its class
(`Settings`, a subclass of base.Settings; field names are the users' flat config keys, e.g.
t5_num_buckets), with a check(cfg) that refuses bad values in one line. GPTConfig keeps only
the choice (pos_encoding, rope_scaling) and the chosen settings (pos_settings, by key);
positional.build() makes the typed object and calls from_config(cfg, settings).

Capabilities, read by model/train/sample code instead of encoding names (always asked of
the built encoding; they are class attributes except where a setting decides them):
  max_positions        None if any position works, else how many it can represent
                       (the size of a table, or where its numbers stop being finite)
  cache_rotated_keys   True: keys are cached after rotate(); False: cached raw and
                       re-rotated every call (for rotations that depend on the length)
  excluded_param_names parameter names left out of the reported model size (GPT-2's wpe)
  needs_score_matrix   True when the encoding acts on the (Tq, Tk) logits (score_bias or
                       attention_logits). Linear attention never forms that matrix, so it
                       refuses these encodings. Derived from which hooks a class overrides;
                       a class may set it explicitly.
  supports_rope_scaling True if the frequency methods of rope_scaling/ apply (rotary encodings)
  scores_by_query_block True when attention_logits and attention_values may be called on a
                       block of the queries with the keys up to its last one (a call's blocks
                       come in order, the last ending at its last query): in training the model
                       then leaves out the keys hidden from a whole block
                       (attention.causal_blocks), about 3/8 of the square at T = 256
  reads_window         True when from_config reads cfg.window and cfg.sinks (CoPE counts only
                       visible keys): in a per-layer schedule its layers must share one window
  static_decoding      True when a decode step needs nothing from the host but the positions
                       tensor: set_length(n) and start_decoding once for the whole generation
                       are enough, and whatever the step keeps across calls lives in tensors
                       of fixed shape written in place. decode.py then runs a static,
                       compilable step; False: generation takes GPT.forward with a growing cache
  ordered_keys         True when attention_logits needs the keys in position order (CoPE's
                       counts): a static ring cache then hands them over rotated into order
  extrapolates         True where perplexity was measured flat from 1x to 16x the training
                       length (README, "Train short, test long"); sample.py then lets the text
                       run past the training length without a window
"""
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Settings:
    """No settings. An encoding's subclass adds typed fields named as the flat config keys
    (a field with metadata {"length": True} holds a length where 0 means "the length the
    model was trained at", see positional.pin_lengths)."""

    def check(self, cfg):
        """Raise ValueError with one actionable line if a value cannot work with cfg (GPTConfig)."""


class PositionalEncoding(nn.Module):
    name = "none"
    Settings = Settings
    max_positions = None
    cache_rotated_keys = True
    excluded_param_names = ()
    needs_score_matrix = False
    supports_rope_scaling = False
    extrapolates = False
    reads_window = False
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

    def start_decoding(self, batch, n_positions, device, dtype):
        pass

    def end_decoding(self):
        pass

    def embed(self, pos):
        return None

    def layer_input(self, x, pos, layer):
        pass

    def rotate(self, x, pos, is_key=False):
        return x

    def score_bias(self, q_pos, k_pos):
        return None

    def attention_logits(self, q, k, q_pos, k_pos, layer):
        return None

    def attention_values(self, probs, q_pos, k_pos, layer):
        return None

    def method_label(self):
        """The length-extension method in use, for reports ('yarn x4', 'rerope w32'); '' for none."""
        return ""

    def extra_repr(self):
        return f"name={self.name!r}"


def relative_positions(q_pos, k_pos):
    """(Tq, Tk) matrix of key_position - query_position (<= 0 for visible keys)."""
    return k_pos[None, :] - q_pos[:, None]
