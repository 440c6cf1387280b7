"""What a RoPE extension method does at an evaluation length T, in numbers (compare.py's report and
docs/extrapolation.md state it for every method and length).

A method with factor s, trained at L, turns each pair's theta_j into theta'_j at length T (the method's own
function, rope_inv_freq(..., seq_len=T)); r_j = theta_j / theta'_j is how much pair j is slowed:

    scale         r of the slowest pair: s for linear, ntk, ntk_by_parts, yarn, llama3 (T-independent);
                  for dynamic alpha(T) = s T / L - (s - 1) past L, 1 up to L (Hugging Face's formula: at s = 4
                  13 at 4L and 61 at 16L; at s = 1 alpha = T / L, the YaRN paper's s = max(1, l'/L))
    kept          pairs with r_j = 1 (rotating as in training, extrapolated)
    interpolated  pairs slowed as much as the slowest (r_j = scale > 1)
    blended       the others (NTK's geometric slope, YaRN's ramp)
    reach         (T - 1) theta'_slowest / ((L - 1) theta_slowest): the slowest pair's largest angle at T
                  against the largest it met in training; above 1, angles it never saw
    logit_scale   the factor on every logit (YaRN's 1 / t = m^2)
    base          the base b' with theta'_j = b'^(-2j/d) where one exists (ntk, dynamic: b alpha^(d/(d-2)))

ReRoPE (positional/rerope.py) keeps every frequency and caps the distance instead: the largest distance
rotated is min(T - 1, w), Leaky ReRoPE's w + (T - 1 - w) / k past w (w: half the training length); STRING
(positional/string_rope.py) shifts it: T - 1 - S + W once T - 1 >= S (S = int(0.33 L), W = L / 16).
"""
import math

import torch

from ..rerope import LeakyReRoPESettings
from ..string_rope import STRINGSettings, offsets
from ..rope import rope_inv_freq
from . import METHODS

DISTANCE_CAPS = ("rerope", "leaky_rerope", "string")   # the logit methods (positional.LOGIT_METHODS): frequencies kept


def effect(kind, factor, L, T, dim, base=10000.0):
    """{method, factor, length, ratio, scale, kept, blended, interpolated, pairs, reach, logit_scale, base} of the
    method `kind` (a key of METHODS or DISTANCE_CAPS, default settings) with factor s, trained at L, at length T,
    for dim rotary channels (dim / 2 pairs)."""
    plain, _ = rope_inv_freq(dim, base)
    row = dict(method=kind, factor=factor, length=T, ratio=T / L, scale=1.0, kept=dim // 2, blended=0,
               interpolated=0, pairs=dim // 2, reach=(T - 1) / (L - 1), logit_scale=1.0, base=base)
    if kind == "string":
        S, W = offsets(STRINGSettings(), L)
        return dict(row, factor=math.nan, reach=(T - 1 - S + W if T - 1 >= S else T - 1) / (L - 1))
    if kind in DISTANCE_CAPS:
        w, leak = L // 2, (LeakyReRoPESettings.rerope_leak if kind == "leaky_rerope" else math.inf)
        return dict(row, factor=math.nan, reach=(min(T - 1, w) + max(0, T - 1 - w) / leak) / (L - 1))
    if kind not in METHODS:
        raise ValueError(f"unknown RoPE method {kind!r}; valid: {', '.join([*METHODS, *DISTANCE_CAPS])}")
    settings = METHODS[kind][1](rope_factor=factor, rope_original_max_position=L)
    inv, m = rope_inv_freq(dim, base, kind, settings, seq_len=T)
    r = plain / inv                                                        # (dim / 2,) r_j
    kept = torch.isclose(r, torch.ones_like(r), rtol=1e-9, atol=0)
    slowest = r[-1].item()
    full = torch.isclose(r, torch.full_like(r, slowest), rtol=1e-9, atol=0) & ~kept
    geometric = torch.allclose(inv, inv[1] ** torch.arange(len(inv), dtype=inv.dtype), rtol=1e-9, atol=0)
    return dict(row, scale=slowest, kept=int(kept.sum()), interpolated=int(full.sum()),
                blended=int((~kept & ~full).sum()), reach=(T - 1) / ((L - 1) * slowest), logit_scale=m * m,
                base=inv[1].item() ** (-dim / 2) if geometric else math.nan)
