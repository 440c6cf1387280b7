"""Hugging Face style scaling dicts -> our method name and flat setting keys.

A model's config.json carries its RoPE scaling as a dict (`rope_scaling` in transformers
v4, `rope_parameters` in v5), e.g. {"rope_type": "yarn", "factor": 4.0,
"original_max_position_embeddings": 256, "beta_fast": 32, "attention_factor": null}, which
from_hf turns into ("yarn", {"rope_factor": 4.0, "rope_original_max_position": 256,
"rope_beta_fast": 32}). Rules, as transformers reads them: the method is "rope_type", or the
older "type" ("default": none); a None value is absent; "rope_theta" and "partial_rotary_factor"
map to rope_base and rotary_fraction. Differences: the factor is always the dict's "factor" (transformers
derives longrope's, when absent, from max_position_embeddings: interop/hf.py does so on import); a
missing original_max_position_embeddings means block_size; "ntk", "ntk_by_parts" are ours.
"""

_SAME = ("factor", "beta_fast", "beta_slow", "truncate", "attention_factor", "mscale", "mscale_all_dim",
         "low_freq_factor", "high_freq_factor", "short_factor",
         "long_factor")   # HF keys whose flat key is "rope_" + the key
KEYS = {**{k: "rope_" + k for k in _SAME}, "original_max_position_embeddings": "rope_original_max_position",
        "rope_theta": "rope_base", "partial_rotary_factor": "rotary_fraction"}   # HF key -> our flat key
COMMON = ("rope_theta", "partial_rotary_factor")
_BY_PARTS = ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "truncate")
TYPES = {  # rope_type -> (our method, the HF keys it takes besides COMMON)
    "default": ("", ()),
    "linear": ("linear", ("factor",)),
    "dynamic": ("dynamic", ("factor", "original_max_position_embeddings")),
    "yarn": ("yarn", _BY_PARTS + ("attention_factor", "mscale", "mscale_all_dim")),
    "llama3": ("llama3", ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor")),
    "longrope": ("longrope", ("factor", "original_max_position_embeddings", "short_factor", "long_factor",
                              "attention_factor")),
    "ntk": ("ntk", ("factor",)),
    "ntk_by_parts": ("ntk_by_parts", _BY_PARTS),
}


def from_hf(d):
    """(method_name, {flat_key: value}) for an HF-style rope_scaling dict; ValueError (one
    line) for an unknown type or key."""
    if not isinstance(d, dict):
        raise ValueError(f"a rope_scaling dict is expected, got {d!r}")
    kind, old = d.get("rope_type"), d.get("type")
    if kind is not None and old is not None and kind != old:
        raise ValueError(f"rope_scaling dict has rope_type={kind!r} and type={old!r}; keep one")
    kind = kind if kind is not None else old
    if kind is None:
        raise ValueError(f"rope_scaling dict needs a 'rope_type' (or 'type'): one of {', '.join(TYPES)}")
    if kind not in TYPES:
        raise ValueError(f"unsupported rope_type {kind!r} in the rope_scaling dict; valid: {', '.join(TYPES)}")
    method, takes = TYPES[kind]
    flat = {}
    for key, value in d.items():
        if key in ("rope_type", "type") or value is None:
            continue
        if key not in takes and key not in COMMON:
            raise ValueError(f"unknown key {key!r} for rope_type {kind!r} in the rope_scaling dict; "
                             f"valid: {', '.join(takes + COMMON)}")
        flat[KEYS[key]] = value
    if method and "rope_factor" not in flat:
        raise ValueError(f"rope_type {kind!r} needs a 'factor' in the rope_scaling dict")
    return method, flat
