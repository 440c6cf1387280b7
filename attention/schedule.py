"""Per-layer schedules: which positional encoding and which attention window each layer has,
checked in one place (check_layers: config.py calls it, GPT.__init__ through build_layers).

Two model keys, each a comma pattern repeated over the n_layer layers (and cut at n_layer, as
Gemma 3's 5:1 pattern); "" gives every layer pos_encoding / window (examples: docs/encodings.md):

    layer_encodings = "rope,rope,rope,none"    Llama 4 (Meta 2025, "iRoPE"): NoPE on every 4th layer
    layer_windows   = "32,32,32,0"             Gemma-style local/global layers; 0 = global

pos_encoding stays the model's main encoding and must be one of the pattern's; each distinct
encoding is built once, with the model's rope_scaling where it applies.

An entry "name@key=value@..." is a variant: the encoding with settings (or a rope_scaling) of its
own, the rest the model's (positional.variant_choice), built once per distinct entry:

    layer_encodings = "rope,rope,rope,rope,rope,rope@rope_base=1e6"     Gemma 3: RoPE base 10,000 in the
    layer_windows   = "1024,1024,1024,1024,1024,0"                      local layers, 1,000,000 in the global
    layer_encodings = "rope,rope,rope,rope@rope_scaling=yarn"           YaRN in the global layer only

A variant's encoding is keyed "name@i" among the model's (i: the first layer with it; module names hold
no dots, values may), e.g. pe_layers["rope@5"]; Layer.label keeps the entry as written.
"""
from typing import NamedTuple

import positional

ATTENTIONS = ("softmax", "linear")


class Layer(NamedTuple):
    encoding: str   # the key of its encoding among the model's: a name of positional.REGISTRY, or a variant's "rope@5"
    window: int     # > 0: the layer's queries see only the last `window` keys (and the sinks)
    label: str = ""  # the pattern's entry ("rope@rope_base=1e6"), where it is not `encoding`


def repeat(pattern, n_layer, key, convert):
    """A comma pattern repeated over n_layer layers (one-line ValueError if it cannot be)."""
    items = [p.strip() for p in pattern.split(",")]
    if any(not p for p in items) or len(items) > n_layer:
        raise ValueError(f"{key}={pattern!r} must be 1 to n_layer={n_layer} comma-separated entries "
                         f"(repeated over the layers), got {len(items)}")
    try:
        values = [convert(p) for p in items]
    except ValueError:
        raise ValueError(f"{key}={pattern!r}: each entry must be a whole number of tokens >= 0 (0: global)") from None
    return [values[i % len(values)] for i in range(n_layer)]


def layer_schedule(cfg):
    """[Layer] of each of cfg.n_layer layers."""
    names = [cfg.pos_encoding] * cfg.n_layer
    if cfg.layer_encodings.strip():
        positional.encodings_in_play(cfg.pos_encoding, cfg.layer_encodings)   # names checked, main included
        names = repeat(cfg.layer_encodings, cfg.n_layer, "layer_encodings", str)
    keys = {}
    for i, name in enumerate(names):
        keys.setdefault(name, f"{name.split('@')[0].strip()}@{i}" if "@" in name else name)
    windows = [cfg.window] * cfg.n_layer
    if cfg.layer_windows.strip():
        if cfg.window:
            raise ValueError(f"window={cfg.window} and layer_windows={cfg.layer_windows!r} both set the windows; "
                             f"give one of them (layer_windows: one per layer, 0 for global)")
        windows = repeat(cfg.layer_windows, cfg.n_layer, "layer_windows", int)
        if min(windows) < 0:
            raise ValueError(f"layer_windows={cfg.layer_windows!r}: windows must be >= 0 (0: global)")
    return [Layer(keys[n], w, n if "@" in n else "") for n, w in zip(names, windows)]


def check_shape(cfg, windows):
    if cfg.n_head < 1 or cfg.n_embd % cfg.n_head:
        raise ValueError(f"n_embd={cfg.n_embd} is not divisible by n_head={cfg.n_head}; "
                         f"pick n_embd a multiple of n_head")
    if cfg.window < 0 or cfg.sinks < 0:
        raise ValueError(f"window and sinks must be >= 0 (0: off), got window={cfg.window}, sinks={cfg.sinks}")
    if cfg.sinks and not any(windows):
        raise ValueError(f"sinks={cfg.sinks} needs a window (sinks stay visible past it): add --window=W")
    if cfg.attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {', '.join(ATTENTIONS)}, got {cfg.attention!r}")
    if cfg.n_kv_head < 0 or cfg.n_head % (cfg.n_kv_head or cfg.n_head):
        raise ValueError(f"n_kv_head={cfg.n_kv_head} must divide n_head={cfg.n_head} (0: n_head, no grouping)")
    if cfg.norm not in ("layernorm", "rmsnorm") or cfg.mlp not in ("gelu", "swiglu") or cfg.mlp_hidden < 0:
        raise ValueError(f"norm must be layernorm or rmsnorm, mlp gelu or swiglu, mlp_hidden >= 0 (0: the default); "
                         f"got {cfg.norm!r}, {cfg.mlp!r}, {cfg.mlp_hidden}")


def check_linear(cfg, chosen, windows):
    """Linear attention never forms the score matrix and sums keys once: what it refuses."""
    for cls, _, scaling in chosen.values():
        if cls.needs_score_matrix:
            ok = ", ".join(n for n, c in positional.REGISTRY.items() if not c.needs_score_matrix)
            raise ValueError(f"the {cls.name} encoding acts on the attention score matrix, which linear attention "
                             f"never forms; use one of {ok}, or attention=softmax")
        if scaling is not None and scaling[1].length_dependent:
            raise ValueError(f"the {cls.name} encoding re-rotates cached keys, which linear attention's running "
                             f"sums cannot; drop its rope_scaling or use attention=softmax")
    if any(windows):
        raise ValueError("linear attention has no window; set window=0 (or attention=softmax)")
    if cfg.qk_norm or cfg.logn_scaling or cfg.ssmax:
        raise ValueError("qk_norm, logn_scaling and ssmax are options of softmax attention; drop them "
                         "or use attention=softmax")
    if cfg.n_kv_head not in (0, cfg.n_head):
        raise ValueError("n_kv_head (grouped-query attention) is an option of softmax attention; drop it or use "
                         "attention=softmax")


def check_layers(cfg):
    """(schedule: [Layer] per layer, {name: (class, settings, scaling)}, the main one first): the one
    place a model config is validated, nothing built (config.py calls it; GPT through build_layers).
    One-line ValueError."""
    schedule = layer_schedule(cfg)
    windows = [layer.window for layer in schedule]
    check_shape(cfg, windows)
    keys = {layer.label or layer.encoding: layer.encoding for layer in schedule}    # entry -> its key
    chosen = {keys.get(entry, entry): positional.chosen(cfg, entry)
              for entry in positional.encodings_in_play(cfg.pos_encoding, cfg.layer_encodings)}
    for name, (cls, _, _) in chosen.items():
        if cls.overrides("embed") and any(layer.encoding != name for layer in schedule):
            raise ValueError(f"the {name} encoding acts on the token embeddings, before any layer, so it cannot "
                             f"be given to some layers only; use it for every layer or not at all")
    if cfg.attention == "linear":
        check_linear(cfg, chosen, windows)
    return schedule, chosen


def build_layers(cfg):
    """(schedule: [Layer] per layer, {name: encoding}, the main one first), checked (check_layers)."""
    schedule, chosen = check_layers(cfg)
    return schedule, {name: positional.make(cfg, *c) for name, c in chosen.items()}


def pattern_label(schedule):
    """'rope/w32,none' for a schedule, one period of it where it repeats."""
    labels = [(layer.label or layer.encoding) + (f"/w{layer.window}" if layer.window else "") for layer in schedule]
    for n in range(1, len(labels) + 1):
        if all(labels[i] == labels[i % n] for i in range(len(labels))):
            return ",".join(labels[:n])
