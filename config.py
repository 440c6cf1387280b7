"""Configuration: one dataclass of every key, config files, and --key=value overrides.

    python train.py configs/rope.py --max_iters=500 --n_layer=2

A config file is plain Python whose public top-level names are config keys (as in
nanoGPT), loaded with importlib rather than exec. Every key is checked: an unknown key
gets the closest valid one suggested, a value of the wrong type is refused.
"""
import ast
import dataclasses
import difflib
import importlib.util
import inspect
import os
import typing
from dataclasses import dataclass

from model import GPTConfig, attention_problem


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

    def validate(self):
        import positional
        from positional import rope_scaling
        checks = [
            (self.rope_scaling in ("", *rope_scaling.METHODS),
             f"unknown rope_scaling {self.rope_scaling!r}; valid: {', '.join(rope_scaling.METHODS)} (or empty for none)"),
            (self.rope_factor > 0, f"rope_factor must be > 0, got {self.rope_factor}; 1 means no scaling"),
            (self.rope_original_max_position >= 0,
             f"rope_original_max_position must be >= 0 (0: block_size), got {self.rope_original_max_position}"),
            (self.pos_encoding in positional.REGISTRY,
             f"unknown pos_encoding {self.pos_encoding!r}; valid: {', '.join(positional.REGISTRY)}"),
            (self.n_embd % self.n_head == 0 if self.n_head > 0 else False,
             f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}; pick n_embd a multiple of n_head"),
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
            (self.shaw_max_distance >= 1, f"shaw_max_distance must be >= 1, got {self.shaw_max_distance}"),
            (self.kerple_variant in ("log", "power"), f"kerple_variant must be log or power, got {self.kerple_variant!r}"),
            (self.fire_mlp_width >= 1 and self.fire_init_c > 0 and self.fire_init_L >= 0,
             f"fire needs fire_mlp_width >= 1, fire_init_c > 0, fire_init_L >= 0 (0: block_size), got "
             f"{self.fire_mlp_width}, {self.fire_init_c}, {self.fire_init_L}"),
            (self.window >= 0 and self.sinks >= 0, f"window and sinks must be >= 0, got {self.window}, {self.sinks}"),
            (self.init_from in ("scratch", "resume"), f"init_from must be 'scratch' or 'resume', got {self.init_from!r}"),
            (self.on_nonfinite in ("stop", "skip"), f"on_nonfinite must be 'stop' or 'skip', got {self.on_nonfinite!r}"),
            (self.dtype in ("auto", "float32", "bfloat16", "float16"),
             f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)
        problem = attention_problem(self, positional.REGISTRY[self.pos_encoding])
        if problem:
            raise ConfigError(problem)
        return self

    def model_args(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(GPTConfig)}


FIELDS = {f.name: f for f in dataclasses.fields(Config)}
_TYPES = typing.get_type_hints(Config)


def _unknown(key):
    close = difflib.get_close_matches(key, FIELDS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "; see config.py for the valid keys"
    return ConfigError(f"unknown config key {key!r}{hint}")


def as_bool(what, value):
    """The boolean spellings of every command line: True/False/true/false/1/0; others refused."""
    if value in (True, False, "true", "false") and not isinstance(value, float):
        return value in (True, "true")
    raise ConfigError(f"{what} wants True or False (or true/false/1/0), got {value!r}")


def coerce(key, value):
    """Check `value` against the type of config key `key`; int is accepted for float."""
    if key not in FIELDS:
        raise _unknown(key)
    want = _TYPES[key]
    if want is bool:
        return as_bool(f"config key {key!r}", value)
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if want is str and not isinstance(value, str):
        return str(value)  # --out_dir=123 means the folder "123"
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        raise ConfigError(f"config key {key!r} wants a {want.__name__}, got {value!r} ({type(value).__name__})")
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
    return cls(**values).validate()


def describe(cfg) -> str:
    return "\n".join(f"  {k} = {v!r}" for k, v in dataclasses.asdict(cfg).items())


def model_config(model_args: dict, overrides: dict = None) -> GPTConfig:
    """The GPTConfig of a checkpoint's model_args, with model keys or encoding settings
    overridden (e.g. {"rope_scaling": "yarn", "rope_factor": 4.0, "window": 64}), validated.
    The one way sample, evaluate, compare and the plots rebuild a model's config; a bad
    override is a one-line ConfigError."""
    args = dict(model_args)
    for key, value in (overrides or {}).items():
        if key not in args:
            raise _unknown(key)
        args[key] = coerce(key, value)
    if args.get("sinks") and not args.get("window"):
        raise ConfigError(f"sinks={args['sinks']} needs a window: add --window=W")
    return GPTConfig(**args)
