"""Positional encodings behind one interface (see base.py). Pick one by name:

    pe = positional.build(config)      # config.pos_encoding in REGISTRY

Each encoding declares its settings (a dataclass next to its class); so does each RoPE
frequency method (rope_scaling/). A model config holds the choice (pos_encoding,
rope_scaling) and the chosen settings (pos_settings: {flat key: value}); this module
turns them into typed, checked objects in one place (resolve, build).

Adding an encoding: its file, one line in REGISTRY, configs/<name>.py; the tests
parametrised over REGISTRY pick it up.
"""
import dataclasses
import difflib

from . import combined, rope_scaling as scalings
from .alibi import ALiBi
from .base import PositionalEncoding, Settings
from .complex_order import ComplexOrder
from .conv import Conv
from .cope import CoPE
from .deberta import Deberta
from .fire import FIRE
from .floater import Floater
from .fox import FoX
from .kerple import Kerple
from .learned import Learned
from .multiplicative import Multiplicative
from .nope import NoPE
from .p_rope import PRoPE
from .rerope import LeakyReRoPE, ReRoPE
from .resonance import ResonanceRoPE
from .rope import RoPE
from .rope_2d import RoPE2D
from .rope_learned_freq import RoPELearnedFreq
from .rnn import RNN
from .shaw import Shaw
from .sinusoidal import Sinusoidal
from .t5 import T5Bias
from .transformer_xl import TransformerXL
from .xpos import XPos



class Registry(dict):
    """The encodings by name; a name "a+b" of listed ones is their combination (combined.py)."""

    def __missing__(self, name):
        parts = str(name).split("+")
        if len(parts) < 2 or len(set(parts)) < len(parts) or not all(dict.__contains__(self, p) for p in parts):
            raise KeyError(name)
        classes = {p: dict.__getitem__(self, p) for p in parts}
        if combined.problem(classes):
            raise KeyError(name)
        return combined.combination(tuple(classes.items()))

    def __contains__(self, name):
        return dict.__contains__(self, name) or self.get(name) is not None

    def get(self, name, default=None):
        try:
            return self[name]
        except KeyError:
            return default


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
})
REGISTRY["rope+alibi"] = REGISTRY["rope+alibi"]   # the hybrid the comparison runs; any "a+b" works
# rope_scaling names that replace the encoding rather than its frequencies: name -> (class, the encoding it extends)
LOGIT_METHODS = {"rerope": (ReRoPE, "rope"), "leaky_rerope": (LeakyReRoPE, "rope")}
SCALINGS = (*scalings.METHODS, *LOGIT_METHODS)   # every valid rope_scaling


class SettingError(ValueError):
    """A setting that does not belong to the chosen encoding, or an unknown name."""


def _suggest(name, valid):
    close = difflib.get_close_matches(name, valid, n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def combination_problem(name):
    """Why a name "a+b" is not a valid combination (one line), or None."""
    parts = name.split("+")
    unknown = [p for p in parts if not dict.__contains__(REGISTRY, p) or "+" in p]
    if unknown:
        return (f"unknown encoding {unknown[0]!r} in pos_encoding={name!r}; {_suggest(unknown[0], REGISTRY)}"
                f"valid parts: {', '.join(n for n in REGISTRY if '+' not in n)}")
    if len(set(parts)) < len(parts):
        return f"pos_encoding={name!r} names an encoding twice; name each part once"
    return combined.problem({p: dict.__getitem__(REGISTRY, p) for p in parts})


def rotary(cls):
    """Whether an encoding class rotates with RoPE's frequencies (itself or one of its parts)."""
    return issubclass(cls, RoPE) or any(map(rotary, getattr(cls, "part_classes", {}).values()))


def scaling_problem(pos_encoding, rope_scaling):
    """Why rope_scaling cannot apply to pos_encoding (one line), or None."""
    if not rope_scaling:
        return None
    if rope_scaling in LOGIT_METHODS:
        extends = LOGIT_METHODS[rope_scaling][1]
        if pos_encoding != extends:
            return f"rope_scaling={rope_scaling!r} is defined for the {extends} encoding only; this model uses {pos_encoding!r}"
        return None
    if rope_scaling not in scalings.METHODS:
        return (f"unknown rope_scaling {rope_scaling!r}; {_suggest(rope_scaling, SCALINGS)}"
                f"valid: {', '.join(SCALINGS)} (or empty for none)")
    if not rotary(REGISTRY[pos_encoding]):   # the frequency methods apply to rotary encodings
        rotaries = ", ".join(n for n, c in REGISTRY.items() if rotary(c))
        return (f"rope_scaling={rope_scaling!r} needs a rotary encoding ({rotaries}); this model uses "
                f"{pos_encoding!r}: drop --rope_scaling for it")
    return None


def layer_pattern(layer_encodings):
    """The names of a per-layer pattern ("rope,rope,rope,none"), in order; "" gives []."""
    if not layer_encodings.strip():
        return []
    names = [n.strip() for n in layer_encodings.split(",")]
    for n in names:
        if n not in REGISTRY:
            raise SettingError(f"unknown encoding {n!r} in layer_encodings={layer_encodings!r}; "
                               f"{_suggest(n, REGISTRY)}valid: {', '.join(REGISTRY)}")
    return names


def encodings_in_play(pos_encoding, layer_encodings=""):
    """The distinct encodings of a model, its main one (pos_encoding, which a pattern must use) first."""
    names = layer_pattern(layer_encodings)
    if names and pos_encoding not in names:
        raise SettingError(f"layer_encodings={layer_encodings!r} does not use pos_encoding={pos_encoding!r}, "
                           f"the model's main encoding; set --pos_encoding to one of the pattern's")
    return list(dict.fromkeys([pos_encoding, *names]))


def scaling_of(name, rope_scaling):
    """The rope_scaling an encoding of a per-layer schedule takes: the model's where it applies, else none."""
    return rope_scaling if scaling_problem(name, rope_scaling) is None else ""


def settings_classes(pos_encoding, rope_scaling="", layer_encodings=""):
    """(encoding class, [settings classes in play]) for a choice; one-line SettingError if invalid.
    With a per-layer pattern, the settings of every encoding in it are in play (their union)."""
    if "+" in pos_encoding and combination_problem(pos_encoding):
        raise SettingError(combination_problem(pos_encoding))
    if pos_encoding not in REGISTRY:
        raise SettingError(f"unknown pos_encoding {pos_encoding!r}; {_suggest(pos_encoding, REGISTRY)}"
                           f"valid: {', '.join(REGISTRY)}")
    problem = scaling_problem(pos_encoding, rope_scaling)
    if problem:
        raise SettingError(problem)
    cls, classes = _classes_of(pos_encoding, rope_scaling)
    for name in encodings_in_play(pos_encoding, layer_encodings)[1:]:
        classes += [c for c in _classes_of(name, scaling_of(name, rope_scaling))[1] if c not in classes]
    return cls, classes


def _classes_of(pos_encoding, rope_scaling):
    if rope_scaling in LOGIT_METHODS:
        cls = LOGIT_METHODS[rope_scaling][0]
        return cls, [cls.Settings]
    cls = REGISTRY[pos_encoding]
    return cls, [cls.Settings] + ([scalings.METHODS[rope_scaling][1]] if rope_scaling else [])


def _fields(settings_cls):
    return {f.name: f for f in dataclasses.fields(settings_cls)}


def setting_keys():
    """{flat key: (type, [owners])} over every encoding and method: what config parsing accepts."""
    owners = [(name, cls.Settings) for name, cls in REGISTRY.items() if "+" not in name]
    owners += [(f"rope_scaling={m}", s) for m, (_, s) in scalings.METHODS.items()]
    owners += [(f"rope_scaling={m}", c.Settings) for m, (c, _) in LOGIT_METHODS.items()]
    keys = {}
    for owner, s in owners:
        for name, f in _fields(s).items():
            keys.setdefault(name, (f.type if isinstance(f.type, type) else eval(f.type), []))[1].append(owner)
    return keys


def resolve(pos_encoding, rope_scaling="", given=None, inherited=None, layer_encodings=""):
    """The full settings dict of a choice: each setting in play from `given` (set by the user;
    a setting of another encoding or method is refused), else `inherited` (e.g. a checkpoint's,
    when only the rope_scaling changes), else its default."""
    given, inherited = dict(given or {}), dict(inherited or {})
    _, classes = settings_classes(pos_encoding, rope_scaling, layer_encodings)
    in_play = {k: f for c in classes for k, f in _fields(c).items()}
    for key in given:
        if key not in in_play:
            raise SettingError(foreign(key, pos_encoding, rope_scaling))
    out = {}
    for key, f in in_play.items():
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        out[key] = given.get(key, inherited.get(key, default))
    return out


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
    out = dict(settings)
    for name, f in _fields_of_all().items():
        if f.metadata.get("length") and out.get(name) == 0:
            out[name] = length
    return out


def _fields_of_all():
    classes = [c.Settings for c in REGISTRY.values()] + [s for _, s in scalings.METHODS.values()]
    return {k: f for c in classes for k, f in _fields(c).items()}


def typed(settings_cls, settings, cfg):
    """An instance of settings_cls from the dict (keys it lacks take their defaults), checked."""
    names = _fields(settings_cls)
    s = settings_cls(**{k: v for k, v in settings.items() if k in names})
    s.check(cfg)
    return s


def build(cfg, name=None) -> PositionalEncoding:
    """The encoding of a GPTConfig (or, with a per-layer pattern, its encoding `name`, with the
    model's rope_scaling where it applies), its settings typed and checked (one-line ValueError)."""
    return make(cfg, *chosen(cfg, name))


def make(cfg, cls, s, scaling=None):
    """An encoding of class cls from its checked settings s (and (method, its settings) for RoPE)."""
    return cls.from_config(cfg, s) if scaling is None else cls.from_config(cfg, s, scaling)


def chosen(cfg, name=None):
    """(class, settings, (rope_scaling, its settings) or None) of a GPTConfig's encoding `name`: the
    settings typed and checked (one-line ValueError), nothing built."""
    pattern = getattr(cfg, "layer_encodings", "")
    settings = resolve(cfg.pos_encoding, cfg.rope_scaling, inherited=cfg.pos_settings, layer_encodings=pattern)
    name = name or cfg.pos_encoding
    rope_scaling = scaling_of(name, cfg.rope_scaling)
    cls, classes = _classes_of(name, rope_scaling)
    s = typed(classes[0], settings, cfg)
    if len(classes) == 1:
        return cls, s, None
    scaling = typed(classes[1], settings, cfg)
    if not scaling.rope_original_max_position:
        scaling = dataclasses.replace(scaling, rope_original_max_position=cfg.block_size)
    return cls, s, (rope_scaling, scaling)
