"""Configuration: one dataclass of every key, config files, and --key=value overrides.

    python train.py configs/rope.py --max_iters=500 --n_layer=2

A config file is plain Python whose public top-level names are keys (as in nanoGPT), loaded
with importlib. Keys are the fields of Config plus each encoding's flat settings (rope_base,
t5_num_buckets, ...: declared in positional/), gathered into GPTConfig.pos_settings. Every key
is checked: an unknown one gets the closest suggested, a wrong type or another encoding's
setting is refused in one line (docs/training.md).
"""
import ast
import dataclasses
import difflib
import importlib.util
import inspect
import math
import os
import typing
from dataclasses import dataclass

from data.loader import DOCUMENTS
from positional import sampling as position_sampling
import positional
from model import GPTConfig
from positional.schedule import check_layers


class ConfigError(ValueError):
    """A user-facing mistake in a config file or on the command line."""


@dataclass
class Config(GPTConfig):
    # I/O
    out_dir: str = "out"                   # the run's folder: ckpt.pt, log.jsonl
    eval_interval: int = 250               # evaluate (and save) every this many iterations
    log_interval: int = 10                 # print the training loss every this many iterations
    eval_iters: int = 50                   # batches per split in each evaluation
    eval_only: bool = False                # evaluate once and stop
    init_from: str = "scratch"             # 'scratch' or 'resume'
    overwrite: bool = False                # allow a scratch run to replace an existing out_dir/ckpt.pt
    on_nonfinite: str = "stop"             # a nan/inf loss: 'stop' (keep the last good checkpoint) or 'skip' the step
    # wandb
    wandb_log: bool = False                # log to Weights & Biases (offline without an account)
    wandb_project: str = "posgpt"          # wandb project
    wandb_run_name: str = ""               # default: the encoding's name
    wandb_group: str = ""                  # runs of one comparison share a group
    # data
    dataset: str = "shakespeare_char"      # a folder of data/ with prepare.py
    data_dir: str = "data"                 # datasets live in data_dir/dataset/{train,val}.bin
    task: str = ""                         # a synthetic task of tasks/ instead of the dataset (e.g. copy)
    documents: str = "stream"              # rows: 'stream' (any offset), 'aligned' (at document starts) or
                                           # 'masked' (aligned, positions restart and attention stays in each document)
    gradient_accumulation_steps: int = 1   # micro-batches per optimizer step
    batch_size: int = 64                   # sequences per micro-batch
    # optimiser: AdamW, warmup then cosine decay
    learning_rate: float = 1e-3            # peak learning rate, after warmup
    max_iters: int = 2000                  # optimizer steps; the schedule follows it unless set (see train.py)
    weight_decay: float = 0.1              # AdamW weight decay (2-d weights only)
    beta1: float = 0.9                     # AdamW beta1
    beta2: float = 0.99                    # AdamW beta2
    grad_clip: float = 1.0                 # 0 disables clipping
    decay_lr: bool = True                  # False: a constant learning_rate
    warmup_iters: int = 100                # linear warmup steps
    lr_decay_iters: int = 0                # cosine decay to min_lr ends here; 0: max_iters
    min_lr: float = 1e-4                   # learning rate at the end of the decay
    # system
    device: str = "auto"                   # auto: cuda, then mps, then cpu
    dtype: str = "auto"                    # auto: bfloat16 where supported on cuda, else float32
    compile: bool = False                  # torch.compile the model
    backend: str = "auto"                  # DDP backend; auto: nccl on cuda, gloo on cpu
    seed: int = 1337                       # model initialisation and batches
    # positions sampled in training (position_sampling.py): "" contiguous, "randomized" (Ruoss et al.
    # 2023, an ordered subset of [0, max_position)), "pose" (Zhu et al. 2024, chunks with skips below max_position)
    position_sampling: str = ""            # "", "randomized" or "pose"
    pose_chunks: int = 2                   # pose: chunks per sequence

    def validate(self):
        lows = {"block_size": 1, "batch_size": 1, "n_layer": 1, "gradient_accumulation_steps": 1, "learning_rate": 0,
                "min_lr": 0, "max_iters": 0, "eval_iters": 1, "eval_interval": 1}
        checks = [(getattr(self, k) >= low, f"{k} must be >= {low}, got {getattr(self, k)}") for k, low in lows.items()]
        checks += [
            (0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}"),
            (self.init_from in ("scratch", "resume"), f"init_from must be 'scratch' or 'resume', got {self.init_from!r}"),
            (self.on_nonfinite in ("stop", "skip"), f"on_nonfinite must be 'stop' or 'skip', got {self.on_nonfinite!r}"),
            (self.dtype in ("auto", "float32", "bfloat16", "float16"),
             f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)
        check_device(self.device)
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
# Keys sample.py and evaluate.py accept on a checkpoint: they change how the trained model is
# run, not the model (every other model key, e.g. pos_encoding or n_layer, is refused there):
# RoPE extension methods and their settings, windows and sinks, log-n scaling.
EVAL_KEYS = {"rope_scaling", "window", "sinks", "logn_scaling", "layer_windows", "attention_kernel", "grid_width"} | {
    k for k, (_, owners) in SETTINGS.items() if all(o.startswith("rope_scaling=") for o in owners)}
SCHEDULE = ("lr_decay_iters", "warmup_iters")   # move with max_iters unless set with or after it


def check_device(device):
    """device, if this machine has it; else a one-line ConfigError naming the fix."""
    import torch
    if device == "auto":
        return device
    try:
        kind = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"unknown device {device!r}; use auto, cpu, cuda, cuda:N or mps") from None
    mps = getattr(torch.backends, "mps", None)
    have = {"cpu": True, "cuda": torch.cuda.is_available(), "mps": mps is not None and mps.is_available()}
    if not have.get(kind.type, True):
        raise ConfigError(f"--device={device}: this machine has no {kind.type.upper()} device that torch can use; "
                          f"use --device=cpu (or --device=auto: the best one here)")
    if kind.type == "cuda" and kind.index is not None and kind.index >= torch.cuda.device_count():
        raise ConfigError(f"--device={device}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                          f"use cuda:0..cuda:{torch.cuda.device_count() - 1}")
    return device


def eval_key(key, value, options=()):
    """A model key given to sample.py or evaluate.py on a checkpoint: only an evaluation-time
    key (EVAL_KEYS), typed; a key that would change the trained model is refused in one line."""
    close = difflib.get_close_matches(key, options, n=1, cutoff=0.8)
    if not is_key(key) and close:
        raise ConfigError(f"unknown option --{key}; did you mean --{close[0]}?")
    if is_key(key) and key not in EVAL_KEYS:
        raise ConfigError(f"--{key} would change the trained model (the checkpoint's is used as trained); only "
                          f"evaluation-time keys apply here: rope_scaling and its settings, window, sinks, "
                          f"logn_scaling, layer_windows, attention_kernel, grid_width (--help lists them)")
    return coerce(key, value)


def _settings_classes():
    """Every settings class of every (encoding, rope_scaling) choice."""
    out = []
    for enc in positional.REGISTRY:
        for method in ("", *positional.SCALINGS):
            if positional.scaling_problem(enc, method) is None:
                out += [c for c in positional.settings_classes(enc, method)[1] if c not in out]
    return out


def key_defaults():
    """({Config field: default}, {encoding setting: (default, [owners])}), for --help."""
    fields = {f.name: f.default for f in dataclasses.fields(Config) if f.default is not dataclasses.MISSING}
    defaults = {f.name: f.default for c in _settings_classes() for f in dataclasses.fields(c)}
    return fields, {k: (defaults.get(k), owners) for k, (_, owners) in SETTINGS.items()}


def key_sources():
    """The classes whose source comments say what each key means (cli.help_text), subclasses first."""
    return list(dict.fromkeys(k for c in [Config, *_settings_classes()] for k in c.__mro__ if k is not object))


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
        check_layers(cfg)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.attention_kernel not in ("", "flex"):
        raise ConfigError(f"attention_kernel must be '' (automatic) or 'flex', got {cfg.attention_kernel!r}")


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


def gather(argv, own=()):
    """argv: config files and --key=value, in any order (files and overrides apply in order)
    -> ({key: (value, raw)}, note). raw: the override's text (None from a file). Keys in `own`
    (a CLI's own keys) are kept as given; every other key is checked (config.coerce).
    A max_iters set later than the schedule keys moves them (follow_schedule); note says so."""
    values, where, before = {}, {}, {}
    for i, arg in enumerate(argv):
        is_override = arg.startswith("--") or ("=" in arg and not arg.endswith(".py"))
        items = [parse_override(arg)] if is_override else load_file(arg).items()
        for key, value in items:
            source = math.inf if is_override else i      # the command line is one source, the last
            if key in values and where[key] != source:
                before[key] = values[key][0]
            values[key] = (value if key in own else coerce(key, value), arg.split("=", 1)[1] if is_override else None)
            where[key] = source
    return values, follow_schedule(values, where, before)


def follow_schedule(values, where, before):
    """A shortened (or lengthened) run keeps the shape of its learning-rate schedule: when
    max_iters is set by a later source than lr_decay_iters / warmup_iters (the command line
    after a config file, a later file, or over the defaults), each is scaled by new / old
    max_iters (lr_decay_iters = max_iters stays = max_iters). Set with max_iters or after it,
    a key is kept. Returns the line that says what moved, or None."""
    if "max_iters" not in values:
        return None
    new, old = values["max_iters"][0], before.get("max_iters", FIELDS["max_iters"].default)
    moved = []
    for key in SCHEDULE:
        if where.get(key, -1) >= where["max_iters"] or not old or new == old:
            continue
        have = values[key][0] if key in values else FIELDS[key].default
        want = round(have * new / old)
        if want != have:
            values[key] = (want, None)
            moved.append(f"{key} {have} -> {want}")
    return (f"schedule: max_iters {old} -> {new}, so {', '.join(moved)} (the same shape; set them on the command "
            f"line to keep others)") if moved else None


def load_config(argv, cls=Config, say=None) -> Config:
    """argv: [config_file.py] [--key=value ...], in any order (files first apply first).
    say(line) is told when the schedule follows max_iters (gather)."""
    values, note = gather(argv)
    if note and say:
        say(note)
    fields, settings = split_settings({k: v for k, (v, _) in values.items()})
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


def _classes(args):
    """The settings classes of model_args' encoding, rope_scaling and layer encodings."""
    try:
        return positional.settings_classes(args["pos_encoding"], args.get("rope_scaling", ""),
                                           args.get("layer_encodings", ""))[1]
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _older_values(args):
    """Settings added after a checkpoint was written take the value that checkpoint was made
    with (a settings class's older_values, e.g. NTK-by-parts' turns ramp), not today's default."""
    return {k: v for c in _classes(args) for k, v in getattr(c, "older_values", {}).items()}


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
    in_play = {f.name for c in _classes(args) for f in dataclasses.fields(c)}
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
        in_play = {f.name for c in _classes(args) for f in dataclasses.fields(c)}
        given = {k: v for k, v in given.items() if k in in_play}
    args["pos_settings"] = resolve_settings(args["pos_encoding"], args["rope_scaling"], given, args["pos_settings"],
                                            args["layer_encodings"])
    cfg = GPTConfig(**args)
    check_model(cfg)
    return cfg
