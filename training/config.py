"""Configuration: one dataclass of every key, config files (plain Python whose public names are
keys, as in nanoGPT, loaded with importlib) and --key=value overrides. Keys are Config's fields and
each encoding's flat settings (declared in positional/), gathered into GPTConfig.pos_settings.
resolve_model is the one pass from model keys to a checked GPTConfig, for a new run (make_config) and a
checkpoint (model_config) alike: one positional.resolve call, then the model checked. Imports go one way:
this module uses positional/'s registry and resolve; positional/ never imports it."""
import ast
import dataclasses
import difflib
import importlib.util
import inspect
import math
import os
import typing
from dataclasses import dataclass

import positional
import tasks
from data.loader import DOCUMENTS
from model import GPTConfig
from training import sampling as position_sampling
from attention.schedule import check_layers
from training.longlora import targets_problem


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
    curriculum_iters: int = 0              # a task's longest training length grows from its shortest to block_size
                                           # over these iterations (a length curriculum); 0: every length at once
    stop_at_mastery: float = 0.0           # a task run stops at the first evaluation whose exact match at block_size
                                           # on held-out examples reaches this (e.g. 0.95); max_iters the cap; 0: off
    mastery_samples: int = 200             # stop_at_mastery: held-out examples scored at each evaluation
    documents: str = "stream"              # rows: 'stream' (any offset), 'aligned' (at document starts) or
                                           # 'masked' (aligned, positions restart and attention stays in each document)
    copy_rows: float = 0.0                 # fraction of each training batch's rows that hold a random span
                                           # repeated to fill the row (training/copy_rows.py: copying forms; #49)
    copy_min: int = 16                     # copy_rows: the span's shortest length ...
    copy_max: int = 64                     # ... and its longest
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
    parallel: str = "ddp"                  # torchrun's processes: 'ddp' (a copy each) or 'fsdp' (sharded by FSDP2)
    seed: int = 1337                       # model initialisation and batches
    # positions sampled in training (training/sampling.py): "" contiguous, "randomized" (Ruoss et al.
    # 2023, an ordered subset of [0, max_position)), "pose" (Zhu et al. 2024, chunks with skips below max_position)
    position_sampling: str = ""            # "", "randomized" or "pose"
    pose_chunks: int = 2                   # pose: chunks per sequence
    # LongLoRA (Chen et al. 2024; training/longlora.py): a fine-tune of a checkpoint with LoRA and S²-Attn
    finetune_method: str = ""              # "longlora": LoRA on lora_targets, embeddings and norms trained, the rest
                                           # frozen, S²-Attn in groups of s2_group (0: block_size / 4, the paper's)
    lora_rank: int = 8                     # longlora: r of the update (lora_alpha / r) B A
    lora_alpha: float = 16.0               # longlora: its alpha
    lora_targets: str = "qkv,proj"         # longlora: the adapted layers, of qkv, proj (attention in, out) and mlp
    # DroPE (Gelberg et al. 2025; training/drope.py): a RoPE checkpoint recalibrated without positions
    drop_positions: bool = False           # with --init_from=resume: the model becomes pos_encoding=none

    def validate(self, settings=None):
        """self with its encoding's settings resolved (resolve_model; `settings`: the ones given), if every
        key can hold; else a one-line ConfigError naming the first that cannot."""
        lows = {"block_size": 1, "batch_size": 1, "n_layer": 1, "gradient_accumulation_steps": 1, "learning_rate": 0,
                "min_lr": 0, "max_iters": 0, "eval_iters": 1, "eval_interval": 1}
        checks = [(getattr(self, k) < low, f"{k} must be >= {low}, got {getattr(self, k)}") for k, low in lows.items()]
        longlora = self.finetune_method == "longlora"
        if longlora and not self.s2_group:
            self.s2_group = self.block_size // 4
        checks += [
            (self.finetune_method not in ("", "longlora"),
             f"finetune_method must be '' or 'longlora', got {self.finetune_method!r}"),
            (longlora and self.lora_rank < 1, f"lora_rank must be >= 1 for longlora, got {self.lora_rank}"),
            (longlora and self.init_from != "resume",
             "finetune_method=longlora fine-tunes a checkpoint: add --init_from=resume"),
            (longlora and targets_problem(self.lora_targets), targets_problem(self.lora_targets)),
            (self.drop_positions and self.init_from != "resume",
             "drop_positions=True recalibrates a trained model without positions (DroPE): add --init_from=resume "
             "with its checkpoint in --out_dir"),
            (self.drop_positions and self.rope_scaling,
             f"drop_positions=True removes the rotation that rope_scaling={self.rope_scaling} rescales; "
             f"drop --rope_scaling"),
            (self.drop_positions and self.layer_encodings,
             "drop_positions=True drops the one encoding of every layer; drop --layer_encodings"),
            (self.drop_positions and self.finetune_method,
             f"drop_positions=True (DroPE) and finetune_method={self.finetune_method} are two fine-tunes; use one"),
            (self.s2_group != 0 and (self.s2_group < 2 or self.block_size % self.s2_group),
             f"s2_group must be 0 (off) or >= 2 and divide block_size={self.block_size}, got {self.s2_group}"),
            (self.s2_group and self.attention != "softmax", "s2_group (S²-Attn) needs attention=softmax"),
            (not 0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1), got {self.dropout}"),
            (not self.embed_std > 0, f"embed_std must be > 0 (the token embedding's initial std; GPT-2's 0.02), "
                                     f"got {self.embed_std}"),
            (self.init_from not in ("scratch", "resume"),
             f"init_from must be 'scratch' or 'resume', got {self.init_from!r}"),
            (self.on_nonfinite not in ("stop", "skip"),
             f"on_nonfinite must be 'stop' or 'skip', got {self.on_nonfinite!r}"),
            (self.dtype not in ("auto", "float32", "bfloat16", "float16"),
             f"dtype must be auto, float32, bfloat16 or float16, got {self.dtype!r}"),
            (self.documents not in DOCUMENTS,
             f"documents must be one of {', '.join(DOCUMENTS)}, got {self.documents!r}"),
            (self.documents != "stream" and self.task,
             f"documents={self.documents} needs a prepared dataset; a task's rows have no documents"),
            (self.curriculum_iters < 0 or (self.curriculum_iters and not self.task),
             f"curriculum_iters must be >= 0 and needs a task (a length curriculum), got {self.curriculum_iters}"),
            (self.stop_at_mastery and not (self.task and 0 < self.stop_at_mastery <= 1),
             f"stop_at_mastery needs a task and a bar in (0, 1] (e.g. --task=copy --stop_at_mastery=0.95); got "
             f"task={self.task!r}, stop_at_mastery={self.stop_at_mastery}"),
            (self.mastery_samples < 1, f"mastery_samples must be >= 1, got {self.mastery_samples}"),
            (not 0.0 <= self.copy_rows <= 1.0, f"copy_rows must be a fraction in [0, 1], got {self.copy_rows}"),
            (self.copy_rows and not 2 <= self.copy_min <= self.copy_max < self.block_size,
             f"copy rows need 2 <= copy_min <= copy_max < block_size={self.block_size}, got copy_min={self.copy_min}, "
             f"copy_max={self.copy_max}"),
            (self.copy_rows and self.documents == "masked",
             "copy_rows replaces whole rows, and documents=masked keeps each row's documents; use one of them"),
            (self.documents == "masked" and self.position_sampling,
             "documents=masked sets the positions itself (they restart at each document); drop position_sampling"),
            (self.pos_encoding in positional.REGISTRY and not hasattr(tasks.REGISTRY.get(self.task), "places")
             and positional.reads_places(positional.REGISTRY[self.pos_encoding]),
             f"pos_encoding={self.pos_encoding} reads the places of digits that a task supplies; train it on one "
             f"(--task={', --task='.join(n for n, t in tasks.REGISTRY.items() if hasattr(t, 'places'))})"),
        ]
        checks += unused_keys(self)
        problem = next((msg for bad, msg in checks if bad), None) or position_sampling.check(
            self.position_sampling, self.block_size, self.max_position or self.block_size, self.pose_chunks)
        if problem:
            raise ConfigError(problem)
        check_device(self.device)
        self.pos_settings = resolve_model(self.model_args(), settings).pos_settings
        return self

    def model_args(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(GPTConfig)}


def unused_keys(cfg):
    """(bad, message) checks for keys set where they would do nothing: each needs the option it belongs to."""
    lora = next((k for k in ("lora_rank", "lora_alpha", "lora_targets") if getattr(cfg, k) != FIELDS[k].default), "")
    return [
        (cfg.max_position and not cfg.position_sampling,
         f"max_position={cfg.max_position} is the range position_sampling draws training positions from, and "
         f"position_sampling is off (the model would get positions it never trains); add "
         f"--position_sampling=randomized (or pose), or drop --max_position"),
        (cfg.pose_chunks != FIELDS["pose_chunks"].default and cfg.position_sampling != "pose",
         f"pose_chunks={cfg.pose_chunks} applies to position_sampling=pose only; add --position_sampling=pose "
         f"(with --max_position), or drop --pose_chunks"),
        (lora and cfg.finetune_method != "longlora",
         f"{lora} applies to finetune_method=longlora only; add --finetune_method=longlora --init_from=resume, "
         f"or drop --{lora}"),
        (cfg.mastery_samples != FIELDS["mastery_samples"].default and not cfg.stop_at_mastery,
         f"mastery_samples={cfg.mastery_samples} applies to stop_at_mastery only; add --stop_at_mastery=0.95 "
         f"(say), or drop --mastery_samples"),
        (cfg.wandb_group and not cfg.wandb_log,
         f"wandb_group={cfg.wandb_group!r} groups wandb runs, and wandb logging is off; add --wandb_log=True, "
         f"or drop --wandb_group"),
        *[(getattr(cfg, k) != FIELDS[k].default and not cfg.copy_rows,
           f"{k}={getattr(cfg, k)} applies to copy_rows > 0 only; add --copy_rows=0.25 (say), or drop --{k}")
          for k in ("copy_min", "copy_max")],
        (cfg.copy_rows and cfg.task != "",
         f"copy_rows mixes repeated spans into a corpus's batches, and task={cfg.task!r} makes its own; "
         f"drop --copy_rows"),
        *backend_checks(cfg.backend, cfg.device),
        *parallel_checks(cfg),
    ]


def backend_checks(backend, device):
    """(bad, message) checks of the DDP backend: a known one, set only under torchrun, nccl only on CUDA."""
    import torch
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return [
        (backend not in ("auto", "nccl", "gloo"), f"backend must be auto, nccl or gloo, got {backend!r}"),
        (backend != "auto" and "RANK" not in os.environ,
         f"backend={backend} picks how DDP processes talk, and this is one process (no torchrun); drop --backend, "
         f"or launch with torchrun --standalone --nproc_per_node=N train.py ..."),
        (backend == "nccl" and not cuda,
         f"backend=nccl needs CUDA devices, and this run's device is {device if device != 'auto' else 'cpu'}; "
         f"use --backend=gloo (or auto)"),
    ]


def parallel_checks(cfg):
    """(bad, message) checks of --parallel: ddp or fsdp, fsdp under torchrun, without what it does not shard."""
    fsdp = cfg.parallel == "fsdp"
    return [
        (cfg.parallel not in ("ddp", "fsdp"), f"parallel must be ddp or fsdp, got {cfg.parallel!r}"),
        (fsdp and "RANK" not in os.environ,
         "parallel=fsdp shards the model across torchrun's processes, and this is one process (no torchrun); launch "
         "with torchrun --standalone --nproc_per_node=N train.py ... --parallel=fsdp, or drop --parallel"),
        (fsdp and cfg.dtype == "float16",
         "parallel=fsdp trains in float32 or bfloat16 (float16's loss scaler would see one shard's gradients per "
         "rank); use --dtype=bfloat16"),
        (fsdp and cfg.finetune_method,
         f"finetune_method={cfg.finetune_method} merges its adapters into whole weights, which parallel=fsdp does "
         f"not hold; fine-tune with DDP (drop --parallel)"),
    ]


FIELDS = {f.name: f for f in dataclasses.fields(Config)}
MODEL_FIELDS = {f.name for f in dataclasses.fields(GPTConfig)}
SETTINGS = positional.setting_keys()        # flat setting key -> (type, encodings/methods that own it)
_TYPES = typing.get_type_hints(Config)
# Keys sample.py and evaluate.py take on a checkpoint: how the trained model is run (RoPE extension
# methods and their settings, windows, sinks, log-n scaling and Llama 4's temperature, a grid's width); any other
# model key is refused.
EVAL_KEYS = {"rope_scaling", "window", "sinks", "logn_scaling", "layer_windows", "attention_kernel", "grid_width",
             "nope_attn_scale", "nope_floor_scale"} | {
    k for k, (_, owners) in SETTINGS.items() if all(o.startswith("rope_scaling=") for o in owners)}
SCHEDULE = ("lr_decay_iters", "warmup_iters")   # move with max_iters unless set with or after it
NAMES = {int: "an integer", float: "a number", dict: "a dict"}


def check_device(device):
    """device, if this machine has it; else a one-line ConfigError naming the fix."""
    import torch
    if device == "auto":
        return device
    try:
        kind = torch.device(device)
    except (RuntimeError, ValueError):
        raise ConfigError(f"unknown device {device!r}; use auto, cpu, cuda, cuda:N or mps") from None
    have = {"cuda": torch.cuda.is_available(), "mps": torch.backends.mps.is_available()}
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
    known = key in FIELDS or key in SETTINGS
    close = difflib.get_close_matches(key, options, n=1, cutoff=0.8)
    if not known and close:
        raise ConfigError(f"unknown option --{key}; did you mean --{close[0]}?")
    if known and key not in EVAL_KEYS:
        raise ConfigError(f"--{key} would change the trained model (the checkpoint's is used as trained); only "
                          f"evaluation-time keys apply here: rope_scaling and its settings, window, sinks, "
                          f"logn_scaling, nope_attn_scale, layer_windows, attention_kernel, grid_width "
                          f"(--help lists them)")
    return coerce(key, value)


def key_docs():
    """For --help: ({Config field: default}, {setting: (default, [owners])}, the classes whose
    source comments say what each key means, subclasses first)."""
    classes = []
    for enc in positional.REGISTRY:
        for method in ("", *positional.SCALINGS):
            if positional.scaling_problem(enc, method) is None:
                classes += [c for c in positional.settings_classes(enc, method)[1] if c not in classes]
    fields = {f.name: f.default for f in dataclasses.fields(Config) if f.default is not dataclasses.MISSING}
    defaults = {f.name: f.default for c in classes for f in dataclasses.fields(c)}
    settings = {k: (defaults.get(k), owners) for k, (_, owners) in SETTINGS.items()}
    return fields, settings, list(dict.fromkeys(k for c in [Config, *classes] for k in c.__mro__ if k is not object))


def _unknown(key):
    close = difflib.get_close_matches(key, [*FIELDS, *SETTINGS], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "; see config.py and positional/ for the valid keys"
    return ConfigError(f"unknown config key {key!r}{hint}")


def convert(label, want, value, raw=None):
    """value (raw: its text on the command line) as type `want`, or a one-line ConfigError.
    An int is taken for a float; a string takes anything (--out_dir=123 is the folder "123")."""
    if want is bool:   # True/False/true/false/1/0
        if value in (True, False, "true", "false") and not isinstance(value, float):
            return value in (True, "true")
        raise ConfigError(f"{label} wants True or False (or true/false/1/0), got {value!r}")
    if want is str:
        return raw if raw is not None else str(value)
    if want is float and type(value) is int:
        return float(value)
    if not isinstance(value, want) or (want is int and isinstance(value, bool)):
        raise ConfigError(f"{label} wants {NAMES.get(want, want.__name__)}, got {raw if raw is not None else value!r}")
    return value


def coerce(key, value):
    """value checked against the type of config key or encoding setting `key` (convert)."""
    if key not in FIELDS and key not in SETTINGS:
        raise _unknown(key)
    if key == "rope_scaling" and isinstance(value, dict):
        return value   # a Hugging Face style dict, expanded by split_settings
    return convert(f"config key {key!r}", SETTINGS[key][0] if key in SETTINGS else _TYPES[key], value)


def check_model(cfg: GPTConfig):
    """Raise a one-line error if the model config cannot be built."""
    check_layers(cfg)
    if cfg.attention_kernel not in ("", "flex"):
        raise ConfigError(f"attention_kernel must be '' (automatic) or 'flex', got {cfg.attention_kernel!r}")


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
    """argv: config files and --key=value, applied in order -> ({key: (value, raw)}, note).
    raw: the override's text (None from a file). Keys in `own` (a CLI's own) are kept as given,
    every other is checked (coerce). note: what follow_schedule moved, or None."""
    values, where, before = {}, {}, {}
    for i, arg in enumerate(argv):
        override = arg.startswith("--") or ("=" in arg and not arg.endswith(".py"))
        source = math.inf if override else i      # the command line is one source, the last
        for key, value in [parse_override(arg)] if override else load_file(arg).items():
            if key in values and where[key] != source:
                before[key] = values[key][0]
            values[key] = (value if key in own else coerce(key, value), arg.split("=", 1)[1] if override else None)
            where[key] = source
    return values, follow_schedule(values, where, before)


def follow_schedule(values, where, before):
    """A max_iters set by a later source (file or command line) than a SCHEDULE key scales that
    key by new / old max_iters, so the schedule keeps its shape. Returns the line saying so."""
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


def load_config(argv, say=None) -> Config:
    """argv: [config_file.py ...] [--key=value ...] -> the checked Config; say(line) hears follow_schedule's note."""
    values, note = gather(argv)
    if note and say:
        say(note)
    return make_config({k: v for k, (v, _) in values.items()})


def make_config(values: dict) -> Config:
    """The checked Config of flat {key: value}: config fields and encoding settings (grid_width, rope_base, ...)."""
    try:   # positional/'s checks raise ValueError: said as one-line ConfigErrors
        fields, settings = split_settings(values)
        return Config(**fields).validate(settings)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def split_settings(values: dict):
    """(config fields, encoding settings) of a flat {key: value}; a Hugging Face style rope_scaling
    dict ({"rope_type": "yarn", "factor": 4.0, ...}) becomes its method name and flat settings."""
    values = dict(values)
    if isinstance(values.get("rope_scaling"), dict):
        from positional.rope_scaling import hf
        values["rope_scaling"], extra = hf.from_hf(values["rope_scaling"])
        extra = {k: coerce(k, v) for k, v in extra.items()}     # JSON's 32 -> 32.0; "yes" for a bool refused
        values = {**extra, **{k: v for k, v in values.items() if k not in extra}}
    fields = {k: v for k, v in values.items() if k in FIELDS and k not in SETTINGS}
    return fields, {k: v for k, v in values.items() if k in SETTINGS}


def choice(args):
    """(pos_encoding, rope_scaling, layer_encodings) of model keys: what decides which settings are in play."""
    return args["pos_encoding"], args.get("rope_scaling", ""), args.get("layer_encodings", "")


def resolve_model(args: dict, given=None, saved=None, trained=None, strict=True) -> GPTConfig:
    """The one pass from model keys to a checked GPTConfig, for a new run (make_config) and a checkpoint
    (model_config) alike: the encoding's settings resolved by one positional.resolve call (given, else
    `saved` where they apply to the model `trained` chose, else defaults), then the model checked.
    One-line ConfigError."""
    pos_encoding, rope_scaling, layer_encodings = choice(args)
    try:
        settings = positional.resolve(pos_encoding, rope_scaling, given, saved, layer_encodings, strict=strict,
                                      trained=trained)
        cfg = GPTConfig(**{**args, "pos_settings": settings})
        check_model(cfg)
        return cfg
    except ValueError as e:
        raise ConfigError(str(e)) from None


def saved_model_args(model_args: dict):
    """(a checkpoint's model keys, those added since at their defaults; its settings as saved: pos_settings,
    or the flat keys of checkpoints older than pos_settings), nothing resolved (resolve_model does that)."""
    defaults = {k: v for k, v in dataclasses.asdict(GPTConfig()).items() if k != "pos_settings"}
    if "pos_settings" in model_args:
        args = {**defaults, **model_args}
        return args, args.pop("pos_settings")
    args = {**defaults, **{k: v for k, v in model_args.items() if k in MODEL_FIELDS}}
    flat = {k: v for k, v in model_args.items() if k in SETTINGS}
    if args["rope_scaling"] in positional.LOGIT_METHODS and not flat.get("rerope_window"):
        flat["rerope_window"] = max(1, (flat.get("rope_original_max_position") or args["block_size"]) // 2)
    return args, flat


def model_config(model_args: dict, overrides: dict = None, strict: bool = True) -> GPTConfig:
    """The checked GPTConfig of a checkpoint's model_args with model keys or settings overridden
    ({"rope_scaling": "yarn", "rope_factor": 4.0}); the checkpoint's settings carry over where they
    still apply, and strict=False drops given settings the resulting encoding does not take."""
    overrides = dict(overrides or {})
    for key in overrides:
        if not (key in MODEL_FIELDS or key in SETTINGS):
            raise _unknown(key)
    try:
        fields, given = split_settings({k: coerce(k, v) for k, v in overrides.items()})
    except ValueError as e:
        raise ConfigError(str(e)) from None
    args, saved = saved_model_args(model_args)
    return resolve_model({**args, **fields}, given, saved, choice(args), strict)


def upgrade_model_args(model_args: dict) -> dict:
    """A checkpoint's model_args in today's form (model_config's, as a dict): model keys added since
    take their defaults, and the flat settings of checkpoints older than pos_settings become pos_settings."""
    return dataclasses.asdict(model_config(model_args))
