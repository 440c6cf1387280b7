"""Positional encodings behind one interface (base.py), by name: positional.build(config) builds
config.pos_encoding, a key of REGISTRY. Each encoding and each RoPE frequency method (rope_scaling/)
declares its settings (a dataclass next to it); a model config holds the choice (pos_encoding,
rope_scaling) and the chosen settings (pos_settings: {flat key: value}), typed and checked here in
one place (resolve, chosen). Adding an encoding: its file, one line in REGISTRY, configs/<name>.py.
A per-layer schedule's entry may be a variant, "name@key=value@...": the encoding with some of its
settings (or its rope_scaling) of its own (variant_choice), the others the model's.
"""
import ast
import dataclasses
import difflib
import typing

from . import combined, rope_scaling as scalings
from .abacus import Abacus
from .alibi import ALiBi
from .base import PositionalEncoding
from .complex_order import ComplexOrder
from .comrope import ComRoPE
from .conv import Conv
from .coupling import Coupling
from .cope import CoPE
from .dape import DAPE
from .deberta import Deberta
from .fire import FIRE
from .floater import Floater
from .fox import FoX
from .hope import HoPE
from .kerple import Kerple
from .learned import Learned
from .multiplicative import Multiplicative
from .nope import NoPE
from .p_rope import PRoPE
from .path import PaTH
from .rerope import LeakyReRoPE, ReRoPE
from .resonance import ResonanceRoPE
from .rope import RoPE
from .rope_2d import RoPE2D
from .rope_learned_freq import RoPELearnedFreq
from .rnn import RNN
from .shaw import Shaw
from .sinusoidal import Sinusoidal
from .stick_breaking import StickBreaking
from .string_rope import STRING
from .t5 import T5Bias
from .transformer_xl import TransformerXL
from .xpos import XPos


def _suggest(name, valid):
    close = difflib.get_close_matches(name, valid, n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def combination_problem(name):
    """Why a name "a+b" is not a valid combination (one line), or None."""
    parts = name.split("+")
    unknown = [p for p in parts if not dict.__contains__(REGISTRY, p)]
    if unknown:
        return (f"unknown encoding {unknown[0]!r} in pos_encoding={name!r}; {_suggest(unknown[0], REGISTRY)}"
                f"valid parts: {', '.join(n for n in REGISTRY if '+' not in n)}")
    if len(set(parts)) < len(parts):
        return f"pos_encoding={name!r} names an encoding twice; name each part once"
    return combined.problem({p: dict.__getitem__(REGISTRY, p) for p in parts})


class Registry(dict):
    """The encodings by name; a name "a+b" of listed ones is their combination (combined.py)."""

    def __missing__(self, name):
        if name not in self:
            raise KeyError(name)
        return combined.combination(tuple((p, dict.__getitem__(self, p)) for p in name.split("+")))

    def __contains__(self, name):
        return dict.__contains__(self, name) or (isinstance(name, str) and "+" in name
                                                  and not combination_problem(name))


REGISTRY = Registry({
    "none": NoPE,
    "learned": Learned,
    "sinusoidal": Sinusoidal,
    "t5": T5Bias,
    "alibi": ALiBi,
    "rope": RoPE,
    "xpos": XPos,
    "shaw": Shaw,
    "transformer_xl": TransformerXL,
    "kerple": Kerple,
    "fire": FIRE,
    "p_rope": PRoPE,
    "resonance_rope": ResonanceRoPE,
    "rope_learned_freq": RoPELearnedFreq,
    "fox": FoX,
    "cope": CoPE,
    "multiplicative": Multiplicative,
    "conv": Conv,
    "rnn": RNN,
    "floater": Floater,
    "complex_order": ComplexOrder,
    "deberta": Deberta,
    "rope_2d": RoPE2D,
    "hope": HoPE,
    "comrope": ComRoPE,
    "abacus": Abacus,
    "coupling": Coupling,
    "dape": DAPE,
    "stick_breaking": StickBreaking,
    "path": PaTH,
})
REGISTRY["rope+alibi"] = REGISTRY["rope+alibi"]   # the hybrid the comparison runs; any "a+b" works
# rope_scaling names that replace the encoding rather than its frequencies: name -> (class, the encoding it extends)
LOGIT_METHODS = {"rerope": (ReRoPE, "rope"), "leaky_rerope": (LeakyReRoPE, "rope"), "string": (STRING, "rope")}
SCALINGS = (*scalings.METHODS, *LOGIT_METHODS)   # every valid rope_scaling


def rotary(cls):
    """Whether an encoding class rotates with RoPE's frequencies (itself or one of its parts)."""
    return issubclass(cls, RoPE) or any(map(rotary, getattr(cls, "part_classes", {}).values()))


def reads_places(cls):
    """Whether an encoding class reads a task's places of digits (ctx.places; itself or one of its parts)."""
    return cls.reads_places or any(map(reads_places, getattr(cls, "part_classes", {}).values()))


def scaling_problem(pos_encoding, rope_scaling):
    """Why rope_scaling cannot apply to pos_encoding (one line), or None."""
    if not rope_scaling:
        return None
    if rope_scaling in LOGIT_METHODS:
        extends = LOGIT_METHODS[rope_scaling][1]
        return None if pos_encoding == extends else (f"rope_scaling={rope_scaling!r} is defined for the {extends} "
                                                      f"encoding only; this model uses {pos_encoding!r}")
    if rope_scaling not in scalings.METHODS:
        return (f"unknown rope_scaling {rope_scaling!r}; {_suggest(rope_scaling, SCALINGS)}"
                f"valid: {', '.join(SCALINGS)} (or empty for none)")
    if not rotary(REGISTRY[pos_encoding]):   # the frequency methods apply to rotary encodings
        rotaries = ", ".join(n for n, c in REGISTRY.items() if rotary(c))
        return (f"rope_scaling={rope_scaling!r} needs a rotary encoding ({rotaries}); this model uses "
                f"{pos_encoding!r}: drop --rope_scaling for it")
    return None


def encodings_in_play(pos_encoding, layer_encodings=""):
    """The distinct encodings of a model (entries of its pattern, variants included), its main one
    (pos_encoding, which a pattern must use as a plain entry) first."""
    names = [n.strip() for n in layer_encodings.split(",")] if layer_encodings.strip() else []
    for n in names:
        base = n.split("@", 1)[0].strip()
        if base not in REGISTRY:
            raise ValueError(f"unknown encoding {base!r} in layer_encodings={layer_encodings!r}; "
                             f"{_suggest(base, REGISTRY)}valid: {', '.join(REGISTRY)}")
    if names and pos_encoding not in names:
        raise ValueError(f"layer_encodings={layer_encodings!r} does not use pos_encoding={pos_encoding!r}, "
                         f"the model's main encoding; set --pos_encoding to one of the pattern's plain entries")
    return list(dict.fromkeys([pos_encoding, *names]))


def scaling_of(name, rope_scaling):
    """The rope_scaling an encoding of a per-layer schedule takes: the model's where it applies, else none."""
    return rope_scaling if scaling_problem(name, rope_scaling) is None else ""


KINDS = {int: "an integer", float: "a number", bool: "True or False", str: "a word", list: "a list"}


def _typed(entry, key, text, kind):
    """A variant's value `text` as the setting's type (an int for a float setting too); one-line ValueError."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text                                    # a bare word: a string setting's value
    kind = typing.get_origin(kind) or kind              # list[float] -> list
    if kind is float and type(value) is int:
        value = float(value)
    if type(value) is not kind:
        raise ValueError(f"layer_encodings entry {entry!r}: {key} takes {KINDS.get(kind, kind.__name__)}, "
                         f"got {text!r}")
    return value


def variant_choice(entry, rope_scaling=""):
    """(encoding name, its rope_scaling, {setting: typed value}) of a schedule entry "name@key=value@...":
    the keys are settings of the encoding or of its rope_scaling method, or rope_scaling itself (the
    layer's own method, in place of the model's); a plain name takes the model's. One-line ValueError."""
    name, *pairs = [p.strip() for p in entry.split("@")]
    split = [[part.strip() for part in p.partition("=")] for p in pairs]       # [key, "=", value] each
    given = {key: value for key, _, value in split}
    if not all(key and eq and value for key, eq, value in split) or len(given) < len(pairs):
        raise ValueError(f"layer_encodings entry {entry!r} must be name@key=value, each key once "
                         f"(e.g. rope@rope_base=1e6)")
    own = given.pop("rope_scaling", None)
    problem = own is not None and scaling_problem(name, own)
    if problem:
        raise ValueError(f"layer_encodings entry {entry!r}: {problem}")
    scaling = scaling_of(name, rope_scaling) if own is None else own
    types = {f.name: typing.get_type_hints(c)[f.name] for c in _choice(name, scaling)[1]
             for f in dataclasses.fields(c)}
    for key in given:
        if key not in types:
            raise ValueError(f"layer_encodings entry {entry!r}: {key} is not a setting of {name}"
                             f"{' with rope_scaling=' + scaling if scaling else ''}; its settings: "
                             f"{', '.join([*types, 'rope_scaling'])}")
    return name, scaling, {k: _typed(entry, k, v, types[k]) for k, v in given.items()}


def _choice(name, rope_scaling):
    """(class, [its settings class, the method's]) of encoding `name` under a valid rope_scaling."""
    if rope_scaling in LOGIT_METHODS:
        cls = LOGIT_METHODS[rope_scaling][0]
        return cls, [cls.Settings]
    cls = REGISTRY[name]
    return cls, [cls.Settings] + ([scalings.METHODS[rope_scaling][1]] if rope_scaling else [])


def settings_classes(pos_encoding, rope_scaling="", layer_encodings=""):
    """(encoding class, [settings classes in play]) for a choice; one-line ValueError if invalid.
    With a per-layer pattern, the settings of every encoding in it are in play (their union)."""
    if "+" not in pos_encoding and pos_encoding not in REGISTRY:
        raise ValueError(f"unknown pos_encoding {pos_encoding!r}; {_suggest(pos_encoding, REGISTRY)}"
                         f"valid: {', '.join(REGISTRY)}")
    problem = ("+" in pos_encoding and combination_problem(pos_encoding)) or scaling_problem(pos_encoding, rope_scaling)
    if problem:
        raise ValueError(problem)
    cls, classes = _choice(pos_encoding, rope_scaling)
    for entry in encodings_in_play(pos_encoding, layer_encodings)[1:]:
        name, scaling, _ = variant_choice(entry, rope_scaling)
        classes += [c for c in _choice(name, scaling)[1] if c not in classes]
    return cls, classes


def _owners():
    """(owner, settings class) of every encoding and rope_scaling method."""
    yield from ((name, cls.Settings) for name, cls in REGISTRY.items() if "+" not in name)
    yield from ((f"rope_scaling={m}", s) for m, (_, s) in scalings.METHODS.items())
    yield from ((f"rope_scaling={m}", c.Settings) for m, (c, _) in LOGIT_METHODS.items())


def setting_keys():
    """{flat key: (type, [owners])} over every encoding and method: what config parsing accepts."""
    keys = {}
    for owner, s in _owners():
        types = typing.get_type_hints(s)
        for f in dataclasses.fields(s):
            keys.setdefault(f.name, (types[f.name], []))[1].append(owner)
    return keys


def resolve(pos_encoding, rope_scaling="", given=None, inherited=None, layer_encodings="", strict=True,
            trained=None):
    """The full settings dict of a choice (the choice checked: one-line ValueError): each setting in play
    from `given` (set by the user; strict: a setting of another encoding or method is refused, else
    dropped), else `inherited`, else its default. trained: the (pos_encoding, rope_scaling, layer_encodings)
    of the model `inherited` was saved with (a checkpoint's): of it, the settings in play there carry over,
    and one added since it was saved takes its value of then (older_values), not today's default."""
    given, inherited = given or {}, inherited or {}
    _, classes = settings_classes(pos_encoding, rope_scaling, layer_encodings)
    if trained is not None:
        then = settings_classes(*trained)[1]
        kept = {f.name for c in then for f in dataclasses.fields(c)}
        older = {k: v for c in then for k, v in getattr(c, "older_values", {}).items()}
        inherited = {**older, **{k: v for k, v in inherited.items() if k in kept}}
    defaults = {k: v for c in classes for k, v in dataclasses.asdict(c()).items()}
    foreign_keys = [key for key in given if key not in defaults]
    if foreign_keys and strict:
        raise ValueError(foreign(foreign_keys[0], pos_encoding, rope_scaling))
    return {k: given.get(k, inherited.get(k, v)) for k, v in defaults.items()}


def foreign(key, pos_encoding, rope_scaling):
    """The one line for a setting that is not in play."""
    owners = setting_keys().get(key)
    if owners is None:
        return f"unknown setting {key!r}"
    methods = [o.split("=", 1)[1] for o in owners[1] if o.startswith("rope_scaling=")]
    encodings = [o for o in owners[1] if not o.startswith("rope_scaling=")]
    of = " and ".join(([", ".join(encodings)] if encodings else []) +
                      ([f"rope_scaling {'/'.join(methods)}"] if methods else []))
    run = pos_encoding + (f" with rope_scaling={rope_scaling}" if rope_scaling else
                          " with no rope_scaling (add --rope_scaling=...)" if methods and not encodings else "")
    return f"{key} is a setting of {of}; this run uses {run}"


def pin_lengths(settings, length):
    """Set the length settings left at 0 ("the training length") to `length`: a model that
    goes on training at a longer block_size keeps the length it was trained at."""
    lengths = {f.name for _, s in _owners() for f in dataclasses.fields(s) if f.metadata.get("length")}
    return {k: length if k in lengths and v == 0 else v for k, v in settings.items()}


def chosen(cfg, name=None):
    """(class, settings, (rope_scaling, its settings) or None) of a GPTConfig's encoding `name` (the
    main one by default; or an entry of its pattern, a variant's own settings over the model's): the
    settings typed and checked (one-line ValueError), nothing built."""
    settings = resolve(cfg.pos_encoding, cfg.rope_scaling, inherited=cfg.pos_settings,
                       layer_encodings=cfg.layer_encodings)
    name, rope_scaling, own = variant_choice(name or cfg.pos_encoding, cfg.rope_scaling)
    settings = {**settings, **own}
    cls, classes = _choice(name, rope_scaling)
    s, *scaling = [c(**{f.name: settings[f.name] for f in dataclasses.fields(c)}) for c in classes]
    for one in (s, *scaling):
        one.check(cfg)
    if not scaling:
        return cls, s, None
    length = scaling[0].rope_original_max_position or cfg.block_size
    return cls, s, (rope_scaling, dataclasses.replace(scaling[0], rope_original_max_position=length))


def make(cfg, cls, s, scaling=None):
    """An encoding of class cls from its checked settings s (and (method, its settings) for RoPE)."""
    return cls.from_config(cfg, s) if scaling is None else cls.from_config(cfg, s, scaling)


def build(cfg, name=None) -> PositionalEncoding:
    """The encoding of a GPTConfig (or, with a per-layer pattern, its encoding `name`, with the
    model's rope_scaling where it applies), its settings typed and checked (one-line ValueError)."""
    return make(cfg, *chosen(cfg, name))
