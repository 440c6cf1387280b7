"""Combinations: two or more encodings in the same layer, named "a+b" (pos_encoding=rope+alibi,
the hybrid "RoPE plus ALiBi's -m_h |i - j|"; rope+t5 with a learned relative bias b_{i-j}).

Each part contributes through its hooks, in the order named:

    embed:      x -> b.embed(a.embed(x))              (chained)
    rotate:     q, k -> b.rotate(a.rotate(q))         (chained; rotations compose)
    score_bias: a.score_bias(h, q, k) + b.score_bias(h, q, k)   (summed)
    attend:     the one part that forms its own logits, if any (and then no part adds a bias)

so logits(rope+alibi) = q_m R_{n-m} k_n / sqrt(D) - m_h (m - n). Settings are the union of the
parts' (a shared key sets both); rope_scaling applies to the rotary parts.
"""
import dataclasses
import functools

from torch import nn

from .base import PositionalEncoding, Settings
from .rope import RoPE
from .rope_scaling import METHODS

HOOKS = ("embed", "rotate", "score_bias", "attend", "read_input")


def problem(parts):
    """Why the part classes {name: class} cannot be combined (one line), or None."""
    names = "+".join(parts)
    if len(parts) < 2 or "none" in parts:
        return f"a combination names two or more distinct encodings other than none, got {names!r}"
    attending = [n for n, c in parts.items() if c.overrides("attend")]
    biasing = [n for n, c in parts.items() if c.overrides("score_bias") and n not in attending]
    if len(attending) > 1 or attending and biasing:
        return (f"{names}: {attending[0]} forms its own logits, so it combines with no other encoding acting on them "
                f"({', '.join(attending[1:] + biasing)}); combine it with embedding or rotary encodings")
    return None


def takes_scaling(c, method):
    """Whether part class c takes the model's rope_scaling `method` (positional.scaling_problem's rule for
    a part): a frequency method (rope_scaling/) a rotary part, a logit method (ReRoPE's) RoPE itself."""
    return issubclass(c, RoPE) if method in METHODS else c is RoPE


def _own(c, s):
    """Part class c's settings, out of the combination's settings s."""
    return c.Settings(**{f.name: getattr(s, f.name) for f in dataclasses.fields(c.Settings)})


def _settings(parts):
    """One dataclass with every part's fields (the first owner's default), checked by each part."""
    fields = {}
    for c in parts.values():
        for f in dataclasses.fields(c.Settings):
            fields.setdefault(f.name, (f.name, f.type, dataclasses.field(
                default=f.default, default_factory=f.default_factory, metadata=f.metadata)))

    def check(self, cfg):
        for c in parts.values():
            _own(c, self).check(cfg)
    return dataclasses.make_dataclass("CombinedSettings", list(fields.values()), bases=(Settings,),
                                      namespace={"check": check})


@functools.cache
def combination(parts):
    """The class of the encoding "a+b" from ((name, class), ...): it defines only the hooks its parts do."""
    parts = dict(parts)
    hooks = {h: getattr(Combined, "_" + h) for h in HOOKS if any(c.overrides(h) for c in parts.values())}
    biased = [c for c in parts.values() if c.overrides("score_bias")]
    relative_bias = bool(biased) and all(c.relative_bias for c in biased)
    return type("Combined", (Combined,), {"name": "+".join(parts),
                                          "part_classes": parts,
                                          "Settings": _settings(parts),
                                          "relative_bias": relative_bias,
                                          **hooks})


class Combined(PositionalEncoding):
    part_classes = {}

    def __init__(self, parts, n_head):
        super().__init__()
        self.parts, self.n_head = nn.ModuleDict(parts), n_head
        limits = [p.max_positions for p in parts.values() if p.max_positions is not None]
        self.max_positions = min(limits) if limits else None
        self.length_dependent = any(p.length_dependent for p in parts.values())
        self.recompute_rows = max(p.recompute_rows for p in parts.values())   # the attending part's
        self.attends_by_blocks = any(p.attends_by_blocks for p in parts.values())   # the attending part's
        self.excluded_param_names = tuple(n.replace("pe.", f"pe.parts.{name}.", 1)
                                          for name, p in parts.items() for n in p.excluded_param_names)

    @classmethod
    def from_config(cls, cfg, s, scaling=None):
        parts = {}
        for name, c in cls.part_classes.items():
            if scaling is not None and takes_scaling(c, scaling[0]):
                parts[name] = c.from_config(cfg, _own(c, s), scaling)
            else:
                parts[name] = c.from_config(cfg, _own(c, s))
        return cls(parts, cfg.n_head)

    def _embed(self, x, ctx):
        for p in self.parts.values():
            x = p.embed(x, ctx)
        return x

    def _rotate(self, x, ctx, key=False):
        for p in self.parts.values():
            x = p.rotate(x, ctx, key)
        return x

    def _score_bias(self, h, q, k):
        biases = [b for b in (p.score_bias(h, q, k) for p in self.parts.values()) if b is not None]
        return sum(biases) if biases else None

    def _read_input(self, x, ctx, layer):
        for p in self.parts.values():
            p.read_input(x, ctx, layer)

    def _attend(self, q, k, v, ctx, layer):
        for p in self.parts.values():
            if p.overrides("attend"):
                return p.attend(q, k, v, ctx, layer)
