"""Configuration: one dataclass of every key, config files, and --key=value overrides.

    python train.py configs/rope.py --max_iters=500 --n_layer=2

A config file is plain Python whose public top-level names are config keys (as in
nanoGPT), loaded with importlib rather than exec. Every key is checked: an unknown key
gets the closest valid one suggested, a value of the wrong type is refused.

Keys are the fields of Config below, plus each encoding's settings under their flat
names (rope_base, t5_num_buckets, rope_factor, ...: declared next to the encoding in
positional/). Settings are gathered into GPTConfig.pos_settings for the chosen
pos_encoding and rope_scaling; a setting of another encoding is refused in one line.
"""
import ast
import dataclasses
import difflib
import importlib.util
import inspect
import os
import typing
from dataclasses import dataclass

from data.loader import DOCUMENTS
from positional import sampling as position_sampling
import positional
from model import GPTConfig
from positional.schedule import build_layers


class ConfigError(ValueError):
    """A user-facing mistake in a config file or on the command line."""


@dataclass
class Config(GPTConfig):
    # I/O
    out_dir: str = "out"
    eval_interval: int = 250
    log_interval: int = 10
    eval_iters: int = 50
    eval_only: bool = False
    init_from: str = "scratch"             # 'scratch' or 'resume'
    overwrite: bool = False                # allow a scratch run to replace an existing out_dir/ckpt.pt
    on_nonfinite: str = "stop"             # a nan/inf loss: 'stop' (keep the last good checkpoint) or 'skip' the step
    # wandb
    wandb_log: bool = False
    wandb_project: str = "posgpt"
    wandb_run_name: str = ""               # default: the encoding's name
    wandb_group: str = ""                  # runs of one comparison share a group
    # data
    dataset: str = "shakespeare_char"
    data_dir: str = "data"                 # datasets live in data_dir/dataset/{train,val}.bin
    task: str = ""                         # a synthetic task of tasks/ instead of the dataset (e.g. copy)
    documents: str = "stream"              # rows: 'stream' (any offset), 'aligned' (at document starts) or
                                           # 'masked' (aligned, positions restart and attention stays in each document)
    gradient_accumulation_steps: int = 1
    batch_size: int = 64
    # optimiser: AdamW, warmup then cosine decay
    learning_rate: float = 1e-3
    max_iters: int = 2000
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0                 # 0 disables clipping
    decay_lr: bool = True
    warmup_iters: int = 100
    lr_decay_iters: int = 0                # 0: max_iters
    min_lr: float = 1e-4
    # system
    device: str = "auto"                   # auto: cuda, then mps, then cpu
    dtype: str = "auto"                    # auto: bfloat16 where supported on cuda, else float32
    compile: bool = False
    backend: str = "auto"                  # DDP backend; auto: nccl on cuda, gloo on cpu
    seed: int = 1337
    # positions sampled in training (position_sampling.py): "" contiguous, "randomized" (Ruoss et al.
    # 2023, an ordered subset of [0, max_position)), "pose" (Zhu et al. 2024, chunks with skips below max_position)
    position_sampling: str = ""
    pose_chunks: int = 2

    def validate(self):
        checks = [
            (self.block_size >= 1, f"block_size must be >= 1, got {self.block_size}"),
            (self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}"),
            (self.n_layer >= 1, f"n_layer must be >= 1, got {self.n_layer}"),
            (self.gradient_accumulation_steps >= 1,
             f"gradient_accumulation_steps must be >= 1, got {self.gradient_accumulation_steps}"),
            (self.learning_rate >= 0, f"learning_rate must be >= 0, got {self.learning_rate}"),
            (0 <= self.min_lr, f"min_lr must be >= 0, got {self.min_lr}"),
            (self.max_iters >= 0, f"max_iters must be >= 0, got {self.max_iters}"),
            (0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}"),
            (self.eval_iters >= 1, f"eval_iters must be >= 1, got {self.eval_iters}"),
            (self.eval_interval >= 1, f"eval_interval must be >= 1, got {self.eval_interval}"),
            (self.init_from in ("scratch", "resume"), f"init_from must be 'scratch' or 'resume', got {self.init_from!r}"),
            (self.on_nonfinite in ("stop", "skip"), f"on_nonfinite must be 'stop' or 'skip', got {self.on_nonfinite!r}"),
            (self.dtype in ("auto", "float32", "bfloat16", "float16"),
             f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)
        problem = documents_problem(self)
        if problem:
            raise ConfigError(problem)
        problem = position_sampling.check(self.position_sampling, self.block_size,
                                          self.max_position or self.block_size, self.pose_chunks)
        if problem:
            raise ConfigError(problem)
        check_model(GPTConfig(**self.model_args()))
        return self

    def model_args(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(GPTConfig)}


def documents_problem(cfg):
    """A sentence if the documents key cannot hold with the rest of the config, else None."""
    if cfg.documents not in DOCUMENTS:
        return f"documents must be one of {', '.join(DOCUMENTS)}, got {cfg.documents!r}"
    if cfg.documents != "stream" and cfg.task:
        return f"documents={cfg.documents} needs a prepared dataset; a task's rows have no documents"
    if cfg.documents == "masked" and cfg.position_sampling:
        return "documents=masked sets the positions itself (they restart at each document); drop position_sampling"
    return None


FIELDS = {f.name: f for f in dataclasses.fields(Config)}
MODEL_FIELDS = {f.name for f in dataclasses.fields(GPTConfig)}
SETTINGS = positional.setting_keys()        # flat setting key -> (type, encodings/methods that own it)
_TYPES = typing.get_type_hints(Config)


def is_key(key):
    """A config key or an encoding's setting."""
    return key in FIELDS or key in SETTINGS


def _unknown(key):
    close = difflib.get_close_matches(key, [*FIELDS, *SETTINGS], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "; see config.py and positional/ for the valid keys"
    return ConfigError(f"unknown config key {key!r}{hint}")


def as_bool(what, value):
    """The boolean spellings of every command line: True/False/true/false/1/0; others refused."""
    if value in (True, False, "true", "false") and not isinstance(value, float):
        return value in (True, "true")
    raise ConfigError(f"{what} wants True or False (or true/false/1/0), got {value!r}")


def check_model(cfg: GPTConfig):
    """Raise a one-line ConfigError if the model config cannot be built."""
    try:
        build_layers(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def coerce(key, value):
    """Check `value` against the type of config key or setting `key`; int is accepted for float."""
    if key in SETTINGS:
        want = SETTINGS[key][0]
    elif key in FIELDS:
        want = _TYPES[key]
    else:
        raise _unknown(key)
    if key == "rope_scaling" and isinstance(value, dict):
        return value   # a Hugging Face style dict, expanded by split_settings
    if want is bool:
        return as_bool(f"config key {key!r}", value)
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want is str and not isinstance(value, str):
        return str(value)  # --out_dir=123 means the folder "123"
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        article = "an" if want.__name__[0] in "aeiou" else "a"
        raise ConfigError(f"config key {key!r} wants {article} {want.__name__}, got {value!r} ({type(value).__name__})")
    return value


def load_file(path) -> dict:
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path!r} not found; the configs are in configs/ (e.g. configs/rope.py)")
    spec = importlib.util.spec_from_file_location("_posgpt_config", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # report, in one line, what the file did wrong
        raise ConfigError(f"config file {path!r} raised {type(e).__name__}: {e}") from e
    return {k: v for k, v in vars(module).items()
            if not k.startswith("_") and not inspect.ismodule(v) and not callable(v)}


def parse_override(arg):
    if not arg.startswith("--") or "=" not in arg:
        raise ConfigError(f"cannot read argument {arg!r}: overrides look like --key=value")
    key, raw = arg[2:].split("=", 1)
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw  # a bare word is a string: --pos_encoding=rope
    return key, value


def load_config(argv, cls=Config) -> Config:
    """argv: [config_file.py] [--key=value ...], in any order (files first apply first)."""
    values = {}
    for arg in argv:
        is_override = arg.startswith("--") or ("=" in arg and not arg.endswith(".py"))
        items = [parse_override(arg)] if is_override else load_file(arg).items()
        for key, value in items:
            values[key] = coerce(key, value)
    fields, settings = split_settings(values)
    cfg = cls(**fields)
    cfg.pos_settings = resolve_settings(cfg.pos_encoding, cfg.rope_scaling, settings, layer_encodings=cfg.layer_encodings)
    return cfg.validate()


def split_settings(values: dict):
    """(config fields, encoding settings) of a flat {key: value}; a Hugging Face style
    rope_scaling dict ({"rope_type": "yarn", "factor": 4.0, ...}) becomes its method name
    and flat settings."""
    values = dict(values)
    if isinstance(values.get("rope_scaling"), dict):
        from positional.rope_scaling import hf
        try:
            values["rope_scaling"], extra = hf.from_hf(values["rope_scaling"])
        except ValueError as e:
            raise ConfigError(str(e)) from None
        extra = {k: coerce(k, v) for k, v in extra.items()}     # JSON's 32 -> 32.0; "yes" for a bool refused
        values = {**extra, **{k: v for k, v in values.items() if k not in extra}}
    fields = {k: v for k, v in values.items() if k in FIELDS and k not in SETTINGS}
    settings = {k: v for k, v in values.items() if k in SETTINGS}
    return fields, settings


def resolve_settings(pos_encoding, rope_scaling, given, inherited=None, layer_encodings=""):
    try:
        return positional.resolve(pos_encoding, rope_scaling, given, inherited, layer_encodings)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def describe(cfg) -> str:
    return "\n".join(f"  {k} = {v!r}" for k, v in dataclasses.asdict(cfg).items())


def _older_values(args):
    """Settings added after a checkpoint was written take the value that checkpoint was made
    with (a settings class's older_values, e.g. NTK-by-parts' turns ramp), not today's default."""
    _, classes = positional.settings_classes(args["pos_encoding"], args.get("rope_scaling", ""),
                                             args.get("layer_encodings", ""))
    return {k: v for c in classes for k, v in getattr(c, "older_values", {}).items()}


def upgrade_model_args(model_args: dict) -> dict:
    """A checkpoint's model_args in today's form. Checkpoints written before the encodings
    owned their settings kept every knob as a flat field (rope_base, t5_num_buckets, ...):
    the ones of the chosen encoding and method become pos_settings, the rest are dropped.
    Model keys added since a checkpoint was written take their defaults (qk_norm=False, ...)."""
    defaults = {k: v for k, v in dataclasses.asdict(GPTConfig()).items() if k != "pos_settings"}
    model_args = {**defaults, **model_args}
    if "pos_settings" in model_args:
        args = dict(model_args)
        args["pos_settings"] = {**_older_values(args), **args["pos_settings"]}
        return args
    args = {k: v for k, v in model_args.items() if k in MODEL_FIELDS}
    flat = {**_older_values(args), **{k: v for k, v in model_args.items() if k in SETTINGS}}
    if args.get("rope_scaling") in positional.LOGIT_METHODS and not flat.get("rerope_window"):
        flat["rerope_window"] = max(1, (flat.get("rope_original_max_position") or args["block_size"]) // 2)
    _, classes = positional.settings_classes(args["pos_encoding"], args.get("rope_scaling", ""),
                                             args.get("layer_encodings", ""))
    in_play = {f.name for c in classes for f in dataclasses.fields(c)}
    args["pos_settings"] = positional.resolve(args["pos_encoding"], args.get("rope_scaling", ""),
                                              {k: v for k, v in flat.items() if k in in_play},
                                              layer_encodings=args.get("layer_encodings", ""))
    return args


def model_config(model_args: dict, overrides: dict = None, strict: bool = True) -> GPTConfig:
    """The GPTConfig of a checkpoint's model_args, with model keys or encoding settings
    overridden (e.g. {"rope_scaling": "yarn", "rope_factor": 4.0, "window": 64}), validated.
    The one way sample, evaluate, compare and the plots rebuild a model's config. The
    checkpoint's settings carry over where they still apply (rope_base when only the
    rope_scaling changes); strict=False drops given settings that the resulting encoding
    does not take (a sweep over methods where some ignore rope_factor). A bad override is
    a one-line ConfigError."""
    args = upgrade_model_args(model_args)
    overrides = dict(overrides or {})
    for key in overrides:
        if not (key in MODEL_FIELDS or key in SETTINGS):
            raise _unknown(key)
    fields, given = split_settings({k: coerce(k, v) for k, v in overrides.items()})
    args.update(fields)
    if not strict:
        try:
            _, classes = positional.settings_classes(args["pos_encoding"], args["rope_scaling"], args["layer_encodings"])
        except ValueError as e:
            raise ConfigError(str(e)) from None
        in_play = {f.name for c in classes for f in dataclasses.fields(c)}
        given = {k: v for k, v in given.items() if k in in_play}
    args["pos_settings"] = resolve_settings(args["pos_encoding"], args["rope_scaling"], given, args["pos_settings"],
                                            args["layer_encodings"])
    cfg = GPTConfig(**args)
    check_model(cfg)
    return cfg
