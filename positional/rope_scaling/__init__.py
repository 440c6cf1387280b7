"""Length-extension methods for RoPE: pure frequency transforms, one file each, each with a
settings dataclass (flat config keys: rope_factor, rope_beta_fast, ...) and a function

    method(inv_freq, settings, *, base, seq_len=0) -> (inv_freq', attention_scale)

inv_freq: (d/2,) float64 theta_j; settings.rope_original_max_position is resolved (> 0)
before the call; seq_len is the current length (used by "dynamic" and "longrope", whose settings say
length_dependent). attention_scale multiplies queries and keys each (RoPE folds it into
its cos/sin tables). ReRoPE changes the logits instead: an encoding (positional/rerope.py).
"""
from .base import ScalingSettings
from .dynamic import DynamicSettings, dynamic
from .linear import linear
from .llama3 import Llama3Settings, llama3
from .longrope import LongRoPESettings, longrope
from .ntk import ntk
from .ntk_by_parts import NTKByPartsSettings, ntk_by_parts
from .yarn import YarnSettings, yarn

METHODS = {                 # name -> (frequency transform, its settings class)
    "linear": (linear, ScalingSettings),
    "ntk": (ntk, ScalingSettings),
    "dynamic": (dynamic, DynamicSettings),
    "ntk_by_parts": (ntk_by_parts, NTKByPartsSettings),
    "yarn": (yarn, YarnSettings),
    "llama3": (llama3, Llama3Settings),
    "longrope": (longrope, LongRoPESettings),
}

