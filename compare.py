"""Train every positional encoding on the same recipe, measure each past its training length,
and write one report folder (docs/comparison.md, docs/tasks.md). The config's `suite` picks
what is measured:

    python compare.py configs/compare.py                          # "lm": perplexity against length
    python compare.py configs/compare.py --only=rope,alibi --seeds=1 --finetune_iters=0
    python compare.py configs/tasks/quick.py                      # "tasks": accuracy against length
    python compare.py configs/tasks/quick.py --tasks=copy --encodings=none,alibi --jobs=1

Each run is train.py in a subprocess with the shared training keys and its own --pos_encoding
(--task), --seed and --out_dir=<out_root>[/<task>]/<enc>-s<seed>; `jobs` run side by side.
Restartable: a finished run is not trained again, a shorter one resumes, one of another recipe
is refused before anything starts, and measurements are cached in the run's folder.
lm: evaluation.evaluate_checkpoint at every eval length, with each method of rope_scalings, and
with --finetune_iters=N the papers' fine-tune at finetune_factor x L (PI: Chen et al. 2023; YaRN:
Peng et al. 2023) reported as "<enc>+<method> ft"; --context_use=True adds context_use.measure.
tasks: tasks/score.py at `multiples` x L, reported by tasks/report.py.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from measure import compare_report
from measure import evaluation
from training import checkpoint
from training.cli import as_arg, as_list, autocast, fail, fmt_time, help_text, pick_device, pick_dtype, typed
from training.config import FIELDS, Config, ConfigError, coerce, gather

ROOT = os.path.dirname(os.path.abspath(__file__))
DEFAULTS = {   # compare.py's own keys; every other key is a training key (training/config.py)
    "suite": "lm",                    # "lm": perplexity against length; "tasks": accuracy on tasks/
    "encodings": ["all"],             # encodings (and variants) compared; all: every one of the registry
    "only": [],                       # a subset of encodings for this call
    "seeds": 1,                       # runs per encoding, seeds seed, seed+1, ...; reported as mean ± std
    "out_root": "",                   # one folder per run; "": out-compare (lm) or out-tasks (tasks)
    "report_dir": "",                 # "": out_root/report
    "jobs": 1,                        # runs side by side
    "threads": 0,                     # threads per run; 0: cores / jobs
    "eval_lengths": [256, 512, 1024],  # lm: evaluation lengths (tokens)
    "eval_tokens": 8192,              # lm: tokens scored per (run, length) point
    "eval_mode": "nonoverlap",        # lm: nonoverlap or sliding windows (evaluate.py)
    "eval_device": "auto",            # lm: device of the evaluations
    "eval_dtype": "auto",             # lm: dtype of the evaluations
    "rope_scalings": [],              # lm: RoPE extension methods evaluated on the encodings that take them
    "rope_factor": 0.0,               # lm: their factor s; 0: longest eval length / block_size
    "scaled_encodings": [],           # lm: the encodings evaluated with rope_scalings; []: all that take them
    "plots": True,                    # lm: also draw what each encoding does (measure/plots.py)
    "finetune_iters": 0,              # lm: iterations of the fine-tune at s L; 0: no fine-tuning
    "finetune_factor": 0.0,           # lm: s of the fine-tune; 0: rope_factor
    "finetune_longlora": False,       # lm: also LongLoRA's fine-tune (PI + LoRA + S²-Attn), as "<enc>+longlora ft"
    "context_use": False,             # lm: measure context gain and per-position loss of each run
    "context_labels": [],             # lm: more runs to measure: "<enc>+<method>" or "<enc>+<method> ft"
    "context_tokens": 2048,           # lm: targets scored per context length
    "context_sequences": 8,           # lm: sequences of 16 L averaged by the per-position loss
    "variants": {},                   # lm: named runs with their own training keys, {name: {key: value}}
    "tasks": ["copy"],                # tasks: the tasks trained and scored
    "samples": 200,                   # tasks: examples scored per point
    "multiples": [1, 2, 4, 8, 16],    # tasks: scored lengths, in units of block_size
}
SUITES = {"lm": "out-compare", "tasks": "out-tasks"}
PER_RUN = ("task", "pos_encoding", "seed", "out_dir", "init_from", "wandb_run_name")   # set for each run
# training keys a finished run may differ in and still count (the schedule follows max_iters; the rest
# does not change what is trained)
NOT_COMPARED = {"max_iters", "lr_decay_iters", "warmup_iters", "eval_interval", "log_interval", "eval_iters",
                "device", "dtype", "compile", "backend", "data_dir", "wandb_log", "wandb_project", "wandb_group",
                "eval_only", "overwrite"}
USAGE = "python compare.py CONFIG_FILE [--key=value ...]   (config files and keys apply in order)"


def parse(argv):
    """argv: config files and --key=value (config.gather's convention) -> (settings, training keys, Config)."""
    settings, train_keys = dict(DEFAULTS), {}
    values, note = gather(argv, own=DEFAULTS)
    if note:
        print(note)
    for key, (value, raw) in values.items():
        if key in DEFAULTS:
            settings[key] = typed(key, value, DEFAULTS[key], raw, what="compare key")
        elif key in PER_RUN:
            raise ConfigError(f"{key!r} is set by compare.py for each run; choose encodings with --only=... "
                              f"(tasks with --tasks=...) and the output folder with --out_root=...")
        else:
            train_keys[key] = value
    if settings["suite"] not in SUITES:
        raise ConfigError(f"suite must be lm or tasks, got {settings['suite']!r}")
    cfg = Config(**train_keys).validate()  # every training key checked before anything runs
    settings["out_root"] = settings["out_root"] or SUITES[settings["suite"]]
    settings["report_dir"] = settings["report_dir"] or os.path.join(settings["out_root"], "report")
    for key, low in (("seeds", 1), ("jobs", 1), ("threads", 0)):
        if settings[key] < low:
            raise ConfigError(f"need --{key} >= {low}" + (" (0: cores / jobs)" if key == "threads" else "")
                              + f", got {settings[key]}")
    settings["seed_list"] = [cfg.seed + i for i in range(settings["seeds"])]
    settings["eval_device"] = pick_device(settings["eval_device"])
    settings["eval_dtype"] = pick_dtype(settings["eval_dtype"], settings["eval_device"].split(":")[0])
    settings["threads"] = settings["threads"] or max(1, (os.cpu_count() or 1) // settings["jobs"])
    settings["encodings"] = names(settings)
    (check_lm if settings["suite"] == "lm" else check_tasks)(settings, train_keys, cfg)
    settings["wandb_group"] = cfg.wandb_group or f"compare-{os.path.basename(os.path.normpath(settings['out_root']))}"
    return settings, train_keys, cfg


def names(settings):
    """The encodings and variants compared: --only, else encodings ("all": the registry and the variants)."""
    import positional
    variants = settings["variants"]
    for name, keys in variants.items():
        if not isinstance(keys, dict) or keys.get("pos_encoding") not in positional.REGISTRY or {"+", " "} & set(name):
            raise ConfigError(f"variants: {name!r} needs a name without '+' or spaces and a dict of training keys "
                              f"with a pos_encoding of {', '.join(positional.REGISTRY)}, e.g. "
                              f"{{'rope_qknorm': {{'pos_encoding': 'rope', 'qk_norm': True}}}}")
    out = settings["only"] or settings["encodings"]
    out = list(positional.REGISTRY) + list(variants) if out == ["all"] else out
    unknown = [n for n in out if n not in positional.REGISTRY and n not in variants]
    if unknown or not out:
        raise ConfigError(f"unknown encoding {(unknown or [''])[0]!r}; valid: {', '.join(positional.REGISTRY)}"
                          + (f", and the variants {', '.join(variants)}" if variants else ""))
    return out


def check_tasks(settings, train_keys, cfg):
    import tasks
    for name in settings["tasks"]:
        tasks.TaskData(name).check(cfg.block_size)   # unknown task, or one block_size cannot hold
    if settings["samples"] < 1 or not settings["multiples"]:
        raise ConfigError("samples must be >= 1 and multiples non-empty")
    settings["lengths"] = [int(float(m) * cfg.block_size) for m in settings["multiples"]]


def check_lm(settings, train_keys, cfg):
    import positional
    for keys in settings["variants"].values():
        Config(**dict(train_keys, **{k: coerce(k, v) for k, v in keys.items()})).validate()
    lengths = settings["eval_lengths"]
    if not lengths or any(not isinstance(n, int) or n < 1 for n in lengths):
        raise ConfigError(f"need positive integer eval_lengths; got {lengths}")
    settings["rope_factor"] = settings["rope_factor"] or max(lengths) / cfg.block_size
    settings["finetune_factor"] = settings["finetune_factor"] or settings["rope_factor"]
    if settings["finetune_iters"] < 0 or settings["finetune_factor"] * cfg.block_size < 1:
        raise ConfigError(f"need --finetune_iters >= 0 (0: off) and --finetune_factor > 0; got "
                          f"{settings['finetune_iters']}, {settings['finetune_factor']}")
    known = [*positional.REGISTRY, *settings["variants"]]
    if any(e not in known for e in settings["scaled_encodings"]):
        raise ConfigError(f"scaled_encodings: unknown name in {settings['scaled_encodings']}; valid: {', '.join(known)}")
    settings["context_labels"] = [label for label in settings["context_labels"] if context_label(label, settings)]


def context_label(label, settings):
    """Whether context label `label` names a run of this call; a label of a run that this call
    does not make (--only, --finetune_iters=0, --context_use=False, a method not in
    rope_scalings) is False; a label that names no run of any comparison is refused."""
    import positional
    enc, method, ft = parse_label(label)
    ft_only = {"direct": True, "longlora": settings["finetune_longlora"]}   # fine-tunes without a method of their own
    if ft is None or enc not in (*positional.REGISTRY, *settings["variants"]) or method not in (
            *positional.SCALINGS, *(ft_only if ft else [])):
        raise ConfigError(f"context_labels: {label!r} is not a label of this comparison; use '<encoding>+<method>' "
                          f"or '<encoding>+<method> ft' (with --finetune_iters) for a compared encoding and a "
                          f"method of rope_scalings")
    made = (settings["context_use"] and enc in settings["encodings"] and (not ft or settings["finetune_iters"])
            and (method in settings["rope_scalings"] or ft_only.get(method, False)))
    if made and method not in ft_only and not takes(enc, method, settings):
        raise ConfigError(f"context_labels: {label!r} names a method that {enc} does not take")
    return bool(made)


def parse_label(label):
    """"rope+yarn ft" -> ("rope", "yarn", True); "rope" -> ("rope", "", False); ft is None when
    the label has a suffix other than " ft"."""
    head, _, tail = label.partition(" ")
    enc, _, method = head.partition("+")
    return enc, method, {"": False, "ft": True}.get(tail)


def run_keys(name, settings):
    """The training keys that make run `name`: its encoding, or a variant's keys."""
    return {k: coerce(k, v) for k, v in settings["variants"].get(name, {"pos_encoding": name}).items()}


def takes(name, method, settings):
    """Whether the runs of `name` (an encoding or a variant) are evaluated (and fine-tuned)
    with the RoPE method: its encoding accepts it and the name is one of scaled_encodings
    (empty: every name whose encoding accepts it)."""
    import positional
    wanted = settings["scaled_encodings"]
    enc = run_keys(name, settings)["pos_encoding"]
    return positional.scaling_problem(enc, method) is None and (not wanted or name in wanted)


# ---- one run: train.py in a subprocess -------------------------------------------------
def train_command(train_keys, run, settings, resume):
    """train.py's argv for one run: the training keys that differ from config.Config's defaults."""
    keys = dict(train_keys, seed=run["seed"], wandb_group=settings["wandb_group"])
    args = [as_arg(k, v) for k, v in keys.items() if k not in FIELDS or v != FIELDS[k].default]
    args += [as_arg(k, v) for k, v in run["keys"].items()]
    args += [f"--out_dir={run['dir']}", f"--wandb_run_name={run['tag']}"]
    train_py = os.path.relpath(os.path.join(ROOT, "train.py"))  # paths in the keys are relative to the cwd
    return [sys.executable, train_py, *args] + (["--init_from=resume"] if resume else [])


def trained_iters(run_dir, want):
    """Iterations of the run's checkpoint (0 if none); refuses a run trained on another recipe
    (want: the run's training keys)."""
    if not os.path.exists(checkpoint.path_in(run_dir)):
        return 0
    ckpt = checkpoint.load(run_dir)
    have = {**ckpt["config"].get("pos_settings", {}), **ckpt["config"]}
    for key, value in want.items():
        got = have.get(key, FIELDS[key].default if key in FIELDS else None)
        if key not in NOT_COMPARED and got != value:
            raise ConfigError(f"{run_dir} was trained with {key}={got!r}, this comparison asks for {value!r}; "
                              f"use another --out_root (or delete {run_dir})")
    return ckpt["iter_num"]


def train_run(cmd, log_path, tag, threads=None):
    """Run train.py (with `threads` intra-op threads), echoing its progress lines with `tag`;
    the full output goes to log_path."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    with open(log_path, "a") as log:
        log.write(f"$ {shlex.join(cmd)}\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        tail = []
        for line in proc.stdout:
            log.write(line)
            tail = (tail + [line.rstrip()])[-5:]
            if line.startswith(("iter ", "step ", "done:", "error:")):
                print(f"{tag} {line.rstrip()}", flush=True)
        if proc.wait() != 0:
            raise RuntimeError(f"train.py exited {proc.returncode}: {tail[-1] if tail else ''} (full log: {log_path})")


def train(run, train_keys, settings, cfg, tag, log_name="train.out"):
    """Train (or resume) one run to max_iters; -> seconds spent training now."""
    if run["done"] >= cfg.max_iters:
        print(f"{tag} already trained ({run['done']} iters): training skipped", flush=True)
        return 0.0
    print(f"{tag} " + (f"resuming from iter {run['done']}" if run["done"] else "training"), flush=True)
    os.makedirs(run["dir"], exist_ok=True)
    t0 = time.time()
    cmd = train_command(train_keys, run, settings, resume=run["done"] > 0)
    train_run(cmd, os.path.join(run["dir"], log_name), tag, settings["threads"])
    print(f"{tag} trained in {fmt_time(time.time() - t0)}", flush=True)
    return time.time() - t0


def cached(path, key):
    """The value cached in json file `path` under the same settings `key`, else None."""
    if os.path.exists(path):
        with open(path) as f:
            got = json.load(f)
        if got.get("settings") == key:
            return got["value"]
    return None


def cache(path, key, value):
    with open(path + ".tmp", "w") as f:
        json.dump({"settings": key, "value": value}, f, indent=1, default=float)
    os.replace(path + ".tmp", path)
    return value


# ---- suite "lm": perplexity against length --------------------------------------------
def evaluate_run(run_dir, enc, settings, data_dir, ckpt, label=None):
    """Rows of evaluation.evaluate_checkpoint for this run (ckpt: its loaded checkpoint), plus
    one set per RoPE extension method; each row gets `label` (encoding, or encoding+method).
    With a label (a fine-tuned run): its own scaling only, rows labelled so.
    Cached in results.json. Returns (rows, whether they were computed now)."""
    key = {k: settings[k] for k in ("eval_lengths", "eval_tokens", "eval_mode", "rope_factor")}
    key["iter_num"] = ckpt["iter_num"]  # a run trained further is evaluated again
    key["rope_scalings"] = [m for m in settings["rope_scalings"] if label is None and takes(enc, m, settings)]
    path = os.path.join(run_dir, "results.json")
    rows = cached(path, key)
    if rows is not None:
        return rows, False
    variants = [(label or enc, None)] + [(f"{enc}+{m}", {"rope_scaling": m, "rope_factor": key["rope_factor"]})
                                         for m in key["rope_scalings"]]
    rows, device, dtype = [], settings["eval_device"], settings["eval_dtype"]
    for label, overrides in variants:
        got = evaluation.evaluate_checkpoint(run_dir, key["eval_lengths"], mode=key["eval_mode"], overrides=overrides,
                                             tokens_per_point=key["eval_tokens"], device=device, data_dir=data_dir,
                                             dtype=dtype, ckpt=ckpt)
        rows += [dict(row, label=label) for row in got]
    return cache(path, key, rows), True


def finetune_methods(enc, settings):
    """The fine-tunes of one encoding: "" (direct, no scaling) and each frequency method of
    rope_scalings it takes; none when fine-tuning is off or the encoding takes no scaling."""
    from positional import rope_scaling
    if not settings["finetune_iters"] or not takes(enc, "linear", settings):
        return []
    methods = [m for m in settings["rope_scalings"] if m in rope_scaling.METHODS and takes(enc, m, settings)]
    return [""] + methods + (["longlora"] if settings["finetune_longlora"] else [])


def finetune(run, base_iter, method, settings, train_keys, cfg, tag):
    """Fine-tune a copy of the run's checkpoint (at base_iter) at finetune_factor x block_size
    with `method` ("" for none) for finetune_iters; returns (its folder, its checkpoint)."""
    s, ft_dir = settings["finetune_factor"], f"{run['dir']}-ft-{method or 'direct'}"
    target, marker = base_iter + settings["finetune_iters"], os.path.join(ft_dir, "finetuned_from.json")
    if not os.path.exists(marker) or json.load(open(marker)) != {"iter_num": base_iter}:
        os.makedirs(ft_dir, exist_ok=True)   # a copy, so the pretrained run stays as it is; a stale one replaced
        shutil.copyfile(checkpoint.path_in(run["dir"]), checkpoint.path_in(ft_dir))
        with open(marker, "w") as f:
            json.dump({"iter_num": base_iter}, f)
    if checkpoint.load(ft_dir)["iter_num"] < target:
        ft_run = dict(run, dir=ft_dir, tag=f"{run['tag']}-ft-{method or 'direct'}")
        cmd = train_command(train_keys, ft_run, settings, resume=True)
        cmd += [f"--block_size={round(s * cfg.block_size)}", f"--batch_size={max(1, round(cfg.batch_size / s))}",
                f"--max_iters={target}", "--decay_lr=False", f"--learning_rate={cfg.min_lr!r}"]
        scaling = "linear" if method == "longlora" else method   # LongLoRA fine-tunes with PI's interpolation
        cmd += [f"--rope_scaling={scaling}", f"--rope_factor={s!r}"] if method else []
        cmd += ["--finetune_method=longlora"] if method == "longlora" else []   # training/longlora.py
        print(f"{tag} fine-tuning {method or 'direct'} at {round(s * cfg.block_size)} to iter {target}", flush=True)
        train_run(cmd, os.path.join(ft_dir, "train.out"), f"{tag} ft {method or 'direct'}", settings["threads"])
    return ft_dir, checkpoint.load(ft_dir)


def finetune_rows(run, base_iter, settings, train_keys, cfg, tag, rows):
    """rows plus the fine-tuned runs' rows, each "<enc>+<method> ft" next to "<enc>+<method>"."""
    enc, methods = run["encoding"], finetune_methods(run["encoding"], settings)
    for m in methods:
        ft_dir, ckpt = finetune(run, base_iter, m, settings, train_keys, cfg, tag)
        got = evaluate_run(ft_dir, enc, settings, cfg.data_dir, ckpt, label=f"{enc}+{m or 'direct'} ft")[0]
        rows = rows + [dict(r, trained_params=ckpt["lora"]["trained_params"]) if "lora" in ckpt else r for r in got]
    order = [enc, f"{enc}+direct ft"] + [x for m in methods[1:] for x in (f"{enc}+{m}", f"{enc}+{m} ft")]
    return sorted(rows, key=lambda r: order.index(r["label"]) if r["label"] in order else len(order))


def log_eval_to_wandb(ckpt_cfg, rows, enc, seed, settings):
    """The evaluation curve of one run as a wandb table and line plot, in the comparison's group."""
    from training.wandb_util import start_wandb
    cfg = Config(**{k: v for k, v in ckpt_cfg.items() if k in FIELDS})
    cfg.wandb_group = settings["wandb_group"]
    run = start_wandb(cfg, job_type="eval", name=f"{enc}-s{seed}-eval")
    if run is None:
        return
    import wandb
    table = wandb.Table(columns=["label", "length", "loss", "ppl"],
                        data=[[r["label"], r["length"], r["loss"], r["ppl"]] for r in rows])
    run.log({"eval/ppl_by_length": table,
             "eval/ppl_plot": wandb.plot.line(table, "length", "ppl", stroke="label", title=f"{enc}: ppl vs length")})
    for r in rows:
        run.summary[f"eval/ppl@{r['length']}" + ("" if r["label"] == enc else f"/{r['label']}")] = r["ppl"]
    run.finish()


def context_run(enc, run_dir, settings, data_dir, train_len):
    """{label: {"gain": rows, "curve": list}} of context_use.measure for the run as trained and
    each of context_labels that names one of its variants ("<enc>+<method>": the run with that
    scaling; "<enc>+<method> ft": that fine-tune), scored on the validation tokens against
    contexts of train_len (the pretraining length, also for a fine-tune at s L); cached in
    <run>/context.json."""
    from measure import context_use
    if not settings["context_use"]:
        return {}
    sources = {enc: (run_dir, None)}
    for label in settings["context_labels"]:
        e, method, ft = parse_label(label)
        if e == enc and method:
            sources[label] = ((f"{run_dir}-ft-{method}", None) if ft else
                              (run_dir, {"rope_scaling": method, "rope_factor": settings["rope_factor"]}))
    key = dict(tokens=settings["context_tokens"], sequences=settings["context_sequences"],
               rope_factor=settings["rope_factor"], labels=sorted(sources),
               iters={label: checkpoint.load(d)["iter_num"] for label, (d, _) in sources.items()})
    path = os.path.join(run_dir, "context.json")
    out = cached(path, key)
    if out is not None:
        return out
    device, dtype, out = settings["eval_device"], settings["eval_dtype"], {}
    for label, (folder, overrides) in sources.items():
        ckpt = checkpoint.load(folder)
        model = checkpoint.build_model(ckpt, overrides, device, strict=False)
        tokens, _ = evaluation.validation_tokens(ckpt, data_dir, "val")
        with autocast(device, dtype):
            got = context_use.measure(model, tokens, train_len, scored_tokens=settings["context_tokens"],
                                      sequences=settings["context_sequences"], device=device)
        out[label] = {"gain": got["gain"], "curve": None if got["curve"] is None else got["curve"].tolist()}
    return cache(path, key, out)


def lm_run(run, settings, train_keys, cfg, tag):
    """Train (or resume) one run, evaluate it and its fine-tunes; -> its result dict."""
    enc, seed, run_dir = run["encoding"], run["seed"], run["dir"]
    train(run, train_keys, settings, cfg, tag)
    ckpt = checkpoint.load(run_dir)  # loaded once, for the evaluation and wandb
    rows, fresh = evaluate_run(run_dir, enc, settings, cfg.data_dir, ckpt)
    rows = finetune_rows(run, ckpt["iter_num"], settings, train_keys, cfg, tag, rows)
    print(f"{tag} " + ("evaluated" if fresh else "evaluation cached: skipped") + ": " + ", ".join(
        f"ppl@{r['length']} {r['ppl']:.2f}" for r in rows if r["label"] == enc), flush=True)
    if cfg.wandb_log and fresh:
        log_eval_to_wandb(ckpt["config"], rows, enc, seed, settings)
    context = context_run(enc, run_dir, settings, cfg.data_dir, cfg.block_size)
    cmd = ["python"] + train_command(train_keys, run, settings, resume=False)[1:]
    return dict(encoding=enc, seed=seed, run_dir=run_dir, rows=rows, context=context, command=shlex.join(cmd))


# ---- suite "tasks": accuracy against length --------------------------------------------
def task_run(run, settings, train_keys, cfg, tag):
    """Train (or resume) and score one task run; -> its scores and timings."""
    from tasks import score
    timing_path = os.path.join(run["dir"], "timing.json")
    timing = json.load(open(timing_path)) if os.path.exists(timing_path) else {}
    spent = train(run, train_keys, settings, cfg, tag, log_name="run.out")
    if spent:
        timing["train_s"] = timing.get("train_s", 0) * bool(run["done"]) + spent
    iters = checkpoint.load(run["dir"])["iter_num"]
    key = dict(samples=settings["samples"], lengths=settings["lengths"], iter_num=iters)
    path = os.path.join(run["dir"], "task_scores.json")
    scored = cached(path, key)
    if scored is None:
        t0 = time.time()
        out = score.score_checkpoints([run["dir"]], {}, settings["lengths"], settings["samples"])
        scored = cache(path, key, out["runs"][run["dir"]])
        timing["score_s"] = time.time() - t0
    with open(timing_path, "w") as f:
        json.dump(timing, f)
    print(f"{tag} " + ", ".join(f"{x['length']}: {'n/a' if x['exact'] is None else format(x['exact'], '.0%')}"
                                for x in scored["rows"])
          + f" ({timing.get('train_s', 0):.0f}s train, {timing.get('score_s', 0):.0f}s score)", flush=True)
    return dict(run, **scored, **timing)


# ---- the comparison -------------------------------------------------------------------
def plan(settings, train_keys):
    """Every run of the comparison, each checked against its folder's checkpoint up front."""
    runs = []
    for task in settings["tasks"] if settings["suite"] == "tasks" else [""]:
        for enc in settings["encodings"]:
            for seed in settings["seed_list"]:
                keys = dict(run_keys(enc, settings), **({"task": task} if task else {}))
                tag = "-".join(filter(None, [task, enc, f"s{seed}"]))
                run_dir = os.path.join(settings["out_root"], task, f"{enc}-s{seed}")
                done = trained_iters(run_dir, dict(train_keys, **keys, seed=seed))
                runs.append(dict(task=task, encoding=enc, seed=seed, tag=tag, dir=run_dir, keys=keys, done=done))
    return runs


def main(argv):
    if {"-h", "--help"} & set(argv):
        print(help_text(__doc__, USAGE, DEFAULTS, [sys.modules[__name__]], training=True))
        return
    if not argv:   # as train.py: the defaults alone are hours of training; name a config to mean it
        print(f"usage: {USAGE}   (--help: every key)\nconfigs: configs/compare.py configs/tasks/quick.py "
              f"configs/tasks/compare.py", file=sys.stderr)
        sys.exit(2)
    try:
        settings, train_keys, cfg = parse(argv)
        runs = plan(settings, train_keys)
    except (ValueError, FileNotFoundError) as e:
        fail(e)
    import torch
    torch.set_num_threads(settings["threads"])  # the in-process measurements share the cores like the runs
    what = settings["tasks"] if settings["suite"] == "tasks" else []
    print(f"compare: {len(runs)} runs ({' x '.join(', '.join(x) for x in (what, settings['encodings']) if x)} x "
          f"seeds {settings['seed_list']}), {sum(r['done'] < cfg.max_iters for r in runs)} to train, {cfg.max_iters} "
          f"iters of {cfg.batch_size * cfg.block_size:,} tokens each, {settings['jobs']} side by side with "
          f"{settings['threads']} thread(s) each, in {settings['out_root']}/", flush=True)
    t0, results, failed = time.time(), {}, []
    one_run = lm_run if settings["suite"] == "lm" else task_run

    def one(i):
        run = runs[i]
        tag = f"[{i + 1}/{len(runs)} {' '.join(filter(None, [run['task'], run['encoding']]))} s{run['seed']}]"
        try:
            results[i] = one_run(run, settings, train_keys, cfg, tag)
        except (ValueError, RuntimeError, FileNotFoundError) as e:  # one broken run does not stop the others
            print(f"{tag} error: {e}", file=sys.stderr, flush=True)
            failed.append((run["encoding"], run["seed"], str(e)) if settings["suite"] == "lm" else (run["tag"], str(e)))

    with ThreadPoolExecutor(settings["jobs"]) as pool:
        list(pool.map(one, range(len(runs))))
    print(f"compare: {len(runs)} runs in {fmt_time(time.time() - t0)}", flush=True)
    done, command = [results[i] for i in sorted(results)], shlex.join(["python", "compare.py", *argv])
    if settings["suite"] == "lm":
        md = compare_report.write(done, failed, settings, cfg, command)["md"]
    else:
        from tasks import report
        md = report.write_comparison(done, failed, settings, cfg.block_size, time.time() - t0, command)
    print(f"compare: report in {md}" + (f"; {len(failed)} run(s) failed" if failed else ""), flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
