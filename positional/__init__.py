"""Positional encodings behind one interface (see base.py). Pick one by name:

    pe = positional.build(config)      # config.pos_encoding in REGISTRY
"""
from .alibi import ALiBi
from .base import PositionalEncoding
from .fire import FIRE
from .kerple import Kerple
from .learned import Learned
from .nope import NoPE
from .rope import RoPE
from .shaw import Shaw
from .sinusoidal import Sinusoidal
from .t5 import T5Bias
from .transformer_xl import TransformerXL
from .xpos import XPos

REGISTRY = {
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
}


def build(cfg) -> PositionalEncoding:
    if cfg.pos_encoding not in REGISTRY:
        raise ValueError(f"unknown pos_encoding {cfg.pos_encoding!r}; valid: {', '.join(REGISTRY)}")
    cls = REGISTRY[cfg.pos_encoding]
    if cfg.rope_scaling and not cls.supports_rope_scaling:
        rotary = ", ".join(n for n, c in REGISTRY.items() if c.supports_rope_scaling)
        raise ValueError(f"rope_scaling={cfg.rope_scaling!r} needs a rotary encoding ({rotary}); this model uses "
                         f"{cfg.pos_encoding!r}: drop --rope_scaling for it")
    return cls.from_config(cfg)
