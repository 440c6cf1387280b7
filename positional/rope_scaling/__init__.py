"""Length-extension methods for RoPE, one file each.

A frequency method is a pure function

    method(inv_freq, *, factor, original_max_position, dim, base, seq_len, **knobs)
        -> (inv_freq', attention_scale)

inv_freq: (d/2,) float64 theta_j; attention_scale multiplies queries and keys each (RoPE
folds it into its cos/sin tables), so logits are scaled by its square. An attention
method (ReRoPE) keeps the frequencies and forms the attention logits itself
(rerope_logits). RoPE (positional/rope.py) owns the rotation and asks this registry.

Scaling dicts, as saved in checkpoints through flat GPTConfig keys (scaling_from_config):
    {"type": "yarn", "factor": 4.0, "original_max_position": 256, "beta_fast": 32.0, ...}
"""
import dataclasses

from .dynamic import dynamic
from .llama3 import llama3
from .linear import linear
from .ntk import ntk
from .ntk_by_parts import NtkByPartsSettings, ntk_by_parts
from .rerope import rerope_logits, unchanged
from .yarn import YarnSettings, yarn


def _with_settings(method, settings_cls):
    """A method in the settings-API shape, method(inv_freq, s, *, base, seq_len), called with
    this registry's scaling dict. Goes when the settings API lands (issue #10)."""
    def call(inv_freq, *, base, seq_len=None, factor, original_max_position, dim=None, **knobs):
        fields = {f.name for f in dataclasses.fields(settings_cls)}
        s = settings_cls(rope_factor=factor, rope_original_max_position=original_max_position,
                         **{f"rope_{k}": v for k, v in knobs.items() if f"rope_{k}" in fields})
        s.check(None)
        return method(inv_freq, s, base=base, seq_len=seq_len or 0)
    return call


METHODS = {
    "linear": linear,
    "ntk": ntk,
    "dynamic": dynamic,
    "ntk_by_parts": _with_settings(ntk_by_parts, NtkByPartsSettings),
    "yarn": _with_settings(yarn, YarnSettings),
    "llama3": llama3,
    "rerope": unchanged,
    "leaky_rerope": unchanged,
}
LENGTH_DEPENDENT = {"dynamic"}                 # frequencies depend on the current length
ATTENTION = {"rerope", "leaky_rerope"}         # change the attention logits, not the frequencies


def check(scaling):
    """Raise a one-line ValueError if `scaling` (a dict or None) cannot be applied."""
    if not scaling:
        return
    kind = scaling.get("type")
    if kind not in METHODS:
        raise ValueError(f"unknown rope_scaling {kind!r}; valid: {', '.join(METHODS)} (or empty for none)")
    if not scaling.get("factor", 1.0) > 0:
        raise ValueError(f"rope_factor must be > 0, got {scaling['factor']}; 1 means no scaling")
    if not scaling.get("original_max_position", 1) >= 1:
        raise ValueError(f"rope_original_max_position must be >= 1, got {scaling['original_max_position']}")
    if kind in ATTENTION and not scaling.get("window", 1) >= 1:
        raise ValueError(f"rerope_window must be >= 1, got {scaling['window']}")
    if kind == "leaky_rerope" and not scaling.get("leak", 2.0) > 1:
        raise ValueError(f"rerope_leak must be > 1 (distances past the window grow by 1/leak), got {scaling['leak']}")


def apply(inv_freq, scaling, *, base, dim, seq_len=None):
    """(inv_freq', attention_scale) for the scaling dict, or (inv_freq, 1.0) for none."""
    check(scaling)
    if not scaling:
        return inv_freq, 1.0
    knobs = {k: v for k, v in scaling.items() if k != "type"}
    return METHODS[scaling["type"]](inv_freq, base=base, dim=dim, seq_len=seq_len, **knobs)


def scaling_from_config(cfg):
    """The scaling dict of a GPTConfig's flat rope_* keys, or None when rope_scaling is empty."""
    kind = cfg.rope_scaling
    if not kind:
        return None
    original = cfg.rope_original_max_position or cfg.block_size
    scaling = {"type": kind, "factor": cfg.rope_factor, "original_max_position": original}
    if kind in ("ntk_by_parts", "yarn"):
        scaling.update(beta_fast=cfg.rope_beta_fast, beta_slow=cfg.rope_beta_slow)
    if kind == "llama3":
        scaling.update(low_freq_factor=cfg.rope_low_freq_factor, high_freq_factor=cfg.rope_high_freq_factor)
    if kind in ATTENTION:
        scaling["window"] = cfg.rerope_window or max(1, original // 2)
    if kind == "leaky_rerope":
        scaling["leak"] = cfg.rerope_leak
    check(scaling)
    return scaling


def label(scaling):
    """Short name for reports: 'yarn x4', 'rerope w32', 'leaky_rerope w32 k32'."""
    if not scaling:
        return "base"
    if scaling["type"] in ATTENTION:
        leak = f" k{scaling['leak']:g}" if "leak" in scaling else ""
        return f"{scaling['type']} w{scaling['window']}{leak}"
    return f"{scaling['type']} x{scaling['factor']:g}"
