"""Hugging Face style rope_scaling dicts, as found in a model's config.json:

    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "beta_fast": 32}

from_hf turns one into our method name and flat settings, so settings can be copied from
a released model's config (older configs say "type" instead of "rope_type").
"""
KEYS = {                       # Hugging Face key -> our flat setting
    "factor": "rope_factor",
    "original_max_position_embeddings": "rope_original_max_position",
    "beta_fast": "rope_beta_fast",
    "beta_slow": "rope_beta_slow",
    "low_freq_factor": "rope_low_freq_factor",
    "high_freq_factor": "rope_high_freq_factor",
}
TYPES = {"default": "", "linear": "linear", "dynamic": "dynamic", "yarn": "yarn", "llama3": "llama3",
         "ntk": "ntk", "ntk_by_parts": "ntk_by_parts"}


def from_hf(d: dict):
    """(method name, {flat setting: value}) of a Hugging Face rope_scaling dict."""
    kind = d.get("rope_type", d.get("type"))
    if kind not in TYPES:
        raise ValueError(f"rope_scaling dict has rope_type {kind!r}; supported: {', '.join(TYPES)}")
    settings = {}
    for key, value in d.items():
        if key in ("rope_type", "type"):
            continue
        if key not in KEYS:
            raise ValueError(f"rope_scaling dict key {key!r} is not supported; supported: {', '.join(KEYS)}")
        settings[KEYS[key]] = float(value) if isinstance(value, int) and KEYS[key] != "rope_original_max_position" \
            else value
    return TYPES[kind], settings
