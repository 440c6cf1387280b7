"""The one command-line convention of train, sample, evaluate, compare, bench and plots.

    python sample.py --out_dir=out-rope --compile=True --dtype=bfloat16

- Every option is `--key=value`, read as train.py reads it (config.parse_override: a Python
  literal, else the bare word) and typed by the option's default: an int is accepted for a
  float; a string option keeps the raw text (--start=123 is the prompt "123").
- Booleans are True/False/true/false/1/0; anything else (`--compile=ture`) is refused.
- device `auto`: cuda, then mps, then cpu. dtype `auto`: bfloat16 where CUDA supports it,
  else float32; float16 and float32 may be asked for by name.
- Bad input is one line `error: ...` on stderr and exit status 2 (`fail`).
"""
import difflib
import sys

import torch

from training.config import ConfigError, as_bool, parse_override

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
NAMES = {bool: "True or False", int: "an integer", float: "a number", str: "a string", list: "a list"}


def fail(msg, code=2):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def pick_device(requested):
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


def pick_dtype(requested, device_type):
    """The dtype's name; `auto`: bfloat16 on a CUDA device that supports it, else float32."""
    if requested == "auto":
        return "bfloat16" if device_type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    if requested not in DTYPES:
        raise ConfigError(f"dtype must be auto, {', '.join(DTYPES)}, got {requested!r}")
    return requested


def autocast(device, dtype_name):
    """The autocast context of train.py for a device string and a dtype name (float32: none)."""
    from contextlib import nullcontext
    if dtype_name == "float32":
        return nullcontext()
    return torch.autocast(device_type=device.split(":")[0], dtype=DTYPES[dtype_name])


def fmt_time(s):
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def as_list(value):
    """A comma-separated string or a list/tuple literal -> list."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def typed(key, value, default, raw=None, what="--"):
    """`value` (parsed; `raw`: its text on the command line) as the type of `default`."""
    want = type(default)
    label = f"{what}{key}" if what == "--" else f"{what} {key!r}"
    if want is bool:
        return as_bool(label, value)
    if want is str:
        return raw if raw is not None else (value if isinstance(value, str) else str(value))
    if want is list:
        return as_list(value)
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, want) or isinstance(value, bool):
        raise ConfigError(f"{label} wants {NAMES.get(want, want.__name__)}, got {raw if raw is not None else value!r}")
    return value


def parse(argv, options, other=None, positionals=False, doc=None):
    """argv -> (opts, others, words).

    options: {key: default}, typed as above. A key not in options goes to other(key, value)
    -> value (which raises ConfigError for a key it does not know), or is refused with the
    closest option suggested. Arguments without `--` are collected in words when
    positionals is true (folders, config files), refused otherwise. -h/--help prints doc."""
    if doc and {"-h", "--help"} & set(argv):
        print(doc)
        sys.exit(0)
    opts, others, words = dict(options), {}, []
    for arg in argv:
        if not arg.startswith("--") and positionals:
            words.append(arg)
            continue
        if arg.startswith("--") and "=" not in arg and isinstance(options.get(arg[2:]), bool):
            raise ConfigError(f"{arg} needs a value: {arg}=True")
        key, value = parse_override(arg)
        if key in options:
            opts[key] = typed(key, value, options[key], raw=arg.split("=", 1)[1])
        elif other is not None:
            others[key] = other(key, value)
        else:
            close = difflib.get_close_matches(key, options, n=1)
            hint = f"did you mean --{close[0]}?" if close else f"valid: {', '.join('--' + k for k in options)}"
            raise ConfigError(f"unknown option --{key}; {hint}")
    return opts, others, words
