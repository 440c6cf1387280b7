"""The one command-line convention of train, sample, evaluate, compare, bench and plots: every
option is `--key=value`, read as train.py reads it (config.parse_override) and typed by the
option's default (config.convert); bad input is one line `error: ...`, exit 2 (docs/training.md)."""
import ast
import difflib
import inspect
import os
import re
import sys
from contextlib import nullcontext

import torch

from training.config import ConfigError, check_device, convert, parse_override

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def fail(msg, code=2):
    """One line `error: msg` on stderr and exit `code`; under torchrun, rank 0 alone says it."""
    if os.environ.get("RANK", "0") == "0":
        print(f"error: {msg}", file=sys.stderr)
    sys.exit(code)


def pick_device(requested):
    """`auto`: cuda, then mps, then cpu."""
    if requested != "auto":
        return check_device(requested)
    return "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"


def pick_dtype(requested, device_type):
    """The dtype's name; `auto`: bfloat16 on a CUDA device that supports it, else float32."""
    if requested == "auto":
        return "bfloat16" if device_type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    if requested not in DTYPES:
        raise ConfigError(f"dtype must be auto, {', '.join(DTYPES)}, got {requested!r}")
    return requested


def autocast(device, dtype_name):
    """The autocast context for a device string and a dtype name (float32: none)."""
    if dtype_name == "float32":
        return nullcontext()
    return torch.autocast(device_type=device.split(":")[0], dtype=DTYPES[dtype_name])


def fmt_time(s):
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def check_lows(opts, lows):
    """A one-line ConfigError for the first option below its least value (lows: {key: least})."""
    for key, low in lows.items():
        if opts[key] < low:
            raise ConfigError(f"--{key} must be >= {low}, got {opts[key]}")


def as_list(value):
    """A comma-separated string or a list/tuple literal -> list."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def as_arg(key, value):
    """--key=value that config.parse_override reads back as `value` (a bare word stays a string)."""
    if isinstance(value, str):
        try:
            ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return f"--{key}={value}"
    return f"--{key}={value!r}"


def typed(key, value, default, raw=None, what="--"):
    """`value` (parsed; `raw`: its text on the command line) as the type of `default`."""
    if isinstance(default, list):
        return as_list(value)
    return convert(f"{what}{key}" if what == "--" else f"{what} {key!r}", type(default), value, raw)


def parse(argv, options, other=None, positionals=False, doc=None):
    """argv -> (opts, others, words). options: {key: default}, typed. A key not in options goes to
    other(key, value) -> value, or is refused with the closest option suggested. Words without `--` are
    collected when positionals is true. -h/--help prints doc (a string or a function) and exits 0."""
    if doc and {"-h", "--help"} & set(argv):
        print(doc() if callable(doc) else doc)
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


# ---- --help: every key with its default and the comment beside it in the source ----------
def help_lines(keys, sources):
    """'  --key=default  meaning' for each {key: default}, the meaning being the comment that ends
    the first line naming the key (`name: type = value  # meaning` or `"name": value,  # meaning`)
    in the source of one of `sources` (classes, modules, functions)."""
    said = {}
    for obj in sources:
        try:
            lines = inspect.getsource(obj).splitlines()
        except (OSError, TypeError):
            continue
        for m in filter(None, (re.match(r'\s*"?(\w+)"?\s*[:=][^#]*\s#\s*(.*)$', line) for line in lines)):
            said.setdefault(*m.groups())
    width = min(36, max((len(f"--{k}={d!r}") for k, d in keys.items()), default=0) + 2)
    return [f"  {f'--{k}={d!r}':<{width}} {said.get(k, '')}".rstrip() for k, d in keys.items()]


def help_text(doc, usage, options, sources, training=False, eval_keys=False):
    """A CLI's --help: its docstring, usage, its options with defaults and meanings, and the
    training keys (training=True) or the evaluation-time model keys (eval_keys=True)."""
    from training import config
    out = [doc.strip(), "", f"usage: {usage}"] + (["", "options:", *help_lines(options, sources)] if options else [])
    if training or eval_keys:
        fields, settings, key_sources = config.key_docs()
        pick = (lambda k: k not in options) if training else (lambda k: k in config.EVAL_KEYS)
        out += ["", "training keys (training/config.py, model.py's GPTConfig):" if training else
                "evaluation-time model keys (anything else would change the trained model, and is refused):"]
        out += help_lines({k: v for k, v in fields.items() if pick(k)}, key_sources)
        out += ["", "encoding settings (positional/; each taken by the encodings or methods in brackets):"]
        chosen = {k: v for k, v in settings.items() if pick(k)}
        out += [f"{line} [{', '.join(owners)}]" for (_, owners), line in zip(
            chosen.values(), help_lines({k: d for k, (d, _) in chosen.items()}, key_sources))]
    return "\n".join(out)
