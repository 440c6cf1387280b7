"""Train every positional encoding on the same recipe, evaluate each past its training
length, and write one report folder (report.md, CSVs, PNGs).

    python compare.py configs/compare.py                          # every encoding of the config
    python compare.py configs/compare.py --only=rope,alibi --seeds=3
    python compare.py configs/compare.py --max_iters=200 --out_root=out-quick   # any training key
    python compare.py configs/compare.py --jobs=2 --threads=1     # two runs side by side, one thread each

Each run is `train.py` in a subprocess (this interpreter) with the shared training keys and
its own --pos_encoding, --seed and --out_dir=<out_root>/<encoding>-s<seed>; then
evaluation.evaluate_checkpoint scores it at every eval length (and, for the encodings that
support them, with each RoPE extension method of rope_scalings), cached in <run>/results.json.

Restartable: a run whose checkpoint reached max_iters and whose results.json matches the
evaluation settings is skipped; a run with an earlier checkpoint resumes (--init_from=resume).
Nothing here depends on which encoding is trained; compare_report.py writes the report.

The papers' fine-tuning protocol (--finetune_iters=N, 0: off; --finetune_factor=s, 0: the
rope_factor): after pretraining at L, each encoding that takes RoPE scaling is fine-tuned,
from a copy of its checkpoint in <run>-ft-<method>, for N more iterations at length s L
with each frequency method of rope_scalings (position interpolation: Chen et al. 2023,
~1000 steps; YaRN: Peng et al. 2023, 400) and, as PI's control, with none ("direct"), at
a constant learning rate of min_lr and the same tokens per iteration (batch_size / s).
Every fine-tuned model is evaluated with its own scaling; the report shows its row,
"<enc>+<method> ft", next to the row of the same method without fine-tuning. Restartable
like the runs: a fine-tune short of its iterations resumes, a finished one is skipped.

Context use (--context_use=True): context_use.measure's context gain and per-position loss
for each run as trained, and for each label of context_labels (e.g. "rope+yarn",
"rope+yarn ft"), on context_tokens targets per context and context_sequences sequences of
16 L; cached in <run>/context.json, reported as mean ± std over seeds.
"""
import ast
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from training import checkpoint
from measure import compare_report
from measure import evaluation
from training.cli import as_list, autocast, fail, fmt_time, pick_device, pick_dtype, typed
from training.config import FIELDS, Config, ConfigError, coerce, load_file, parse_override

ROOT = os.path.dirname(os.path.abspath(__file__))

# compare.py's own keys and their defaults; every other key is a training key (config.Config)
DEFAULTS = dict(encodings="all", only="", seeds=1, out_root="out-compare", report_dir="",
                eval_lengths=[256, 512, 1024], eval_tokens=8192, eval_mode="nonoverlap", eval_device="auto",
                eval_dtype="auto", rope_scalings=[], rope_factor=0.0, plots=True, finetune_iters=0,
                finetune_factor=0.0, jobs=1, threads=0, context_use=False, context_labels=[],
                scaled_encodings=[], context_tokens=2048, context_sequences=8, variants={})
PER_RUN = ("pos_encoding", "out_dir", "init_from", "wandb_run_name")   # set by compare.py for each run
# training keys a finished run may differ in and still count (they do not change what is trained)
NOT_COMPARED = {"max_iters", "lr_decay_iters", "eval_interval", "log_interval", "eval_iters", "device", "dtype",
                "compile", "backend", "data_dir", "wandb_log", "wandb_project", "wandb_group", "eval_only"}


def parse(argv):
    """argv: config files and --key=value (cli.py's convention; config files first apply
    first) -> (settings, training keys)."""
    settings, train_keys = dict(DEFAULTS), {}
    for arg in argv:
        is_override = arg.startswith("--") or ("=" in arg and not arg.endswith(".py"))
        for key, value in [parse_override(arg)] if is_override else load_file(arg).items():
            if key in DEFAULTS:
                if key in ("only", "encodings") and isinstance(value, (list, tuple)):
                    value = ",".join(value)
                raw = arg.split("=", 1)[1] if is_override and isinstance(DEFAULTS[key], str) else None
                settings[key] = typed(key, value, DEFAULTS[key], raw, what="compare key")
            elif key in PER_RUN:
                raise ConfigError(f"{key!r} is set by compare.py for each run; choose encodings with "
                                  f"--only=... and the output folder with --out_root=...")
            else:
                train_keys[key] = coerce(key, value)
    return check(settings, train_keys)


def check(settings, train_keys):
    import positional
    cfg = Config(**train_keys).validate()  # every training key checked before anything runs
    variants = settings["variants"]
    for name, keys in variants.items():
        if not isinstance(keys, dict) or keys.get("pos_encoding") not in positional.REGISTRY or {"+", " "} & set(name):
            raise ConfigError(f"variants: {name!r} needs a name without '+' or spaces and a dict of training keys "
                              f"with a pos_encoding of {', '.join(positional.REGISTRY)}, e.g. "
                              f"{{'rope_qknorm': {{'pos_encoding': 'rope', 'qk_norm': True}}}}")
        Config(**dict(train_keys, **{k: coerce(k, v) for k, v in keys.items()})).validate()
    names = list(positional.REGISTRY) + list(variants) if settings["encodings"] == "all" else as_list(
        settings["encodings"])
    if settings["only"]:
        names = as_list(settings["only"])
    unknown = [n for n in names if n not in positional.REGISTRY and n not in variants]
    if unknown:
        raise ConfigError(f"unknown encoding {unknown[0]!r}; valid: {', '.join(positional.REGISTRY)}"
                          + (f", and the variants {', '.join(variants)}" if variants else ""))
    lengths = settings["eval_lengths"]
    if not names or settings["seeds"] < 1 or not lengths or any(not isinstance(n, int) or n < 1 for n in lengths):
        raise ConfigError(f"need at least one encoding, --seeds >= 1 and positive integer eval_lengths; got "
                          f"{names}, {settings['seeds']}, {lengths}")
    settings["encodings"] = names
    settings["seed_list"] = [cfg.seed + i for i in range(settings["seeds"])]
    settings["report_dir"] = settings["report_dir"] or os.path.join(settings["out_root"], "report")
    settings["rope_factor"] = settings["rope_factor"] or max(lengths) / cfg.block_size
    settings["finetune_factor"] = settings["finetune_factor"] or settings["rope_factor"]
    if settings["finetune_iters"] < 0 or settings["finetune_factor"] * cfg.block_size < 1:
        raise ConfigError(f"need --finetune_iters >= 0 (0: off) and --finetune_factor > 0; got "
                          f"{settings['finetune_iters']}, {settings['finetune_factor']}")
    if settings["jobs"] < 1 or settings["threads"] < 0:
        raise ConfigError(f"need --jobs >= 1 and --threads >= 0 (0: cores / jobs); got {settings['jobs']}, "
                          f"{settings['threads']}")
    settings["threads"] = settings["threads"] or max(1, (os.cpu_count() or 1) // settings["jobs"])
    if any(e not in positional.REGISTRY and e not in variants for e in settings["scaled_encodings"]):
        raise ConfigError(f"scaled_encodings: unknown name in {settings['scaled_encodings']}; valid: "
                          f"{', '.join(list(positional.REGISTRY) + list(variants))}")
    for label in settings["context_labels"]:
        enc, method, ft = parse_label(label)
        if enc not in names and (enc in positional.REGISTRY or enc in variants):
            continue   # a label of an encoding this invocation does not compare (--only): nothing to measure
        known = ((method in settings["rope_scalings"] or (ft and method == "direct")) and enc in names
                 and (method == "direct" or takes(enc, method, settings)))
        if not known or (ft and not settings["finetune_iters"]) or ft is None:
            raise ConfigError(f"context_labels: {label!r} is not a label of this comparison; use '<encoding>+<method>' "
                              f"or '<encoding>+<method> ft' (with --finetune_iters) for a compared encoding and a "
                              f"method of rope_scalings")
        if not settings["context_use"]:
            raise ConfigError("context_labels needs --context_use=True")
    settings["wandb_group"] = cfg.wandb_group or f"compare-{os.path.basename(os.path.normpath(settings['out_root']))}"
    return settings, train_keys, cfg


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


# ---- one run --------------------------------------------------------------------------
def as_arg(key, value):
    """--key=value that config.parse_override reads back as `value` (a bare word stays a string)."""
    if isinstance(value, str):
        try:
            ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return f"--{key}={value}"
    return f"--{key}={value!r}"


def train_command(train_keys, settings, enc, seed, run_dir, resume):
    """train.py's argv for one run: the training keys that differ from config.Config's defaults."""
    keys = dict(train_keys, seed=seed, wandb_group=settings["wandb_group"])
    args = [as_arg(k, v) for k, v in keys.items() if v != FIELDS[k].default]
    args += [as_arg(k, v) for k, v in run_keys(enc, settings).items()]
    args += [f"--out_dir={run_dir}", f"--wandb_run_name={enc}-s{seed}"]
    train_py = os.path.relpath(os.path.join(ROOT, "train.py"))  # paths in the keys are relative to the cwd
    return [sys.executable, train_py, *args] + (["--init_from=resume"] if resume else [])


def trained_iters(run_dir, train_keys, cfg):
    """Iterations of the run's checkpoint (0 if none); refuses a run trained on another recipe."""
    if not os.path.exists(checkpoint.path_in(run_dir)):
        return 0
    ckpt = checkpoint.load(run_dir)
    for key, want in train_keys.items():
        have = ckpt["config"].get(key, getattr(cfg, key))
        if key not in NOT_COMPARED and key != "seed" and have != want:
            raise ConfigError(f"{run_dir} was trained with {key}={have!r}, this comparison asks for {want!r}; "
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


def evaluate_run(run_dir, enc, settings, data_dir, ckpt, label=None):
    """Rows of evaluation.evaluate_checkpoint for this run (ckpt: its loaded checkpoint), plus
    one set per RoPE extension method; each row gets `label` (encoding, or encoding+method).
    With a label (a fine-tuned run): its own scaling only, rows labelled so.
    Cached in results.json. Returns (rows, whether they were computed now)."""
    key = {k: settings[k] for k in ("eval_lengths", "eval_tokens", "eval_mode", "rope_factor")}
    key["iter_num"] = ckpt["iter_num"]  # a run trained further is evaluated again
    key["rope_scalings"] = [m for m in settings["rope_scalings"]
                            if label is None and takes(enc, m, settings)]
    path = os.path.join(run_dir, "results.json")
    if os.path.exists(path):
        with open(path) as f:
            cached = json.load(f)
        if cached.get("settings") == key:
            return cached["rows"], False
    variants = [(label or enc, None)] + [(f"{enc}+{m}", {"rope_scaling": m, "rope_factor": key["rope_factor"]})
                                for m in key["rope_scalings"]]
    rows, device = [], pick_device(settings["eval_device"])
    dtype = pick_dtype(settings["eval_dtype"], device.split(":")[0])
    for label, overrides in variants:
        got = evaluation.evaluate_checkpoint(run_dir, key["eval_lengths"], mode=key["eval_mode"], overrides=overrides,
                                             tokens_per_point=key["eval_tokens"], device=device, data_dir=data_dir,
                                             dtype=dtype, ckpt=ckpt)
        rows += [dict(row, label=label) for row in got]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"settings": key, "rows": rows}, f, indent=1, default=float)
    os.replace(tmp, path)
    return rows, True


# ---- fine-tuning at the longer length ------------------------------------------------
def finetune_methods(enc, settings):
    """The fine-tunes of one encoding: "" (direct, no scaling) and each frequency method of
    rope_scalings it takes; none when fine-tuning is off or the encoding takes no scaling."""
    from positional import rope_scaling
    if not settings["finetune_iters"] or not takes(enc, "linear", settings):
        return []
    return [""] + [m for m in settings["rope_scalings"]
                   if m in rope_scaling.METHODS and takes(enc, m, settings)]


def finetune(run_dir, base_iter, enc, seed, method, settings, train_keys, cfg, tag):
    """Fine-tune a copy of run_dir's checkpoint (at base_iter) at finetune_factor x block_size
    with `method` ("" for none) for finetune_iters; returns (its folder, its checkpoint)."""
    s, ft_dir = settings["finetune_factor"], f"{run_dir}-ft-{method or 'direct'}"
    target, marker = base_iter + settings["finetune_iters"], os.path.join(ft_dir, "finetuned_from.json")
    if not os.path.exists(marker) or json.load(open(marker)) != {"iter_num": base_iter}:
        os.makedirs(ft_dir, exist_ok=True)   # a copy, so the pretrained run stays as it is; a stale one replaced
        shutil.copyfile(checkpoint.path_in(run_dir), checkpoint.path_in(ft_dir))
        with open(marker, "w") as f:
            json.dump({"iter_num": base_iter}, f)
    if checkpoint.load(ft_dir)["iter_num"] < target:
        cmd = train_command(train_keys, settings, enc, seed, ft_dir, resume=True)
        cmd += [f"--block_size={round(s * cfg.block_size)}", f"--batch_size={max(1, round(cfg.batch_size / s))}",
                f"--max_iters={target}", "--decay_lr=False", f"--learning_rate={cfg.min_lr!r}",
                f"--wandb_run_name={enc}-s{seed}-ft-{method or 'direct'}"]
        cmd += [f"--rope_scaling={method}", f"--rope_factor={s!r}"] if method else []
        print(f"{tag} fine-tuning {method or 'direct'} at {round(s * cfg.block_size)} to iter {target}", flush=True)
        train_run(cmd, os.path.join(ft_dir, "train.out"), f"{tag} ft {method or 'direct'}", settings["threads"])
    return ft_dir, checkpoint.load(ft_dir)


def finetune_rows(run_dir, base_iter, enc, seed, settings, train_keys, cfg, tag, rows):
    """rows plus the fine-tuned runs' rows, each "<enc>+<method> ft" next to "<enc>+<method>"."""
    methods = finetune_methods(enc, settings)
    for m in methods:
        ft_dir, ckpt = finetune(run_dir, base_iter, enc, seed, m, settings, train_keys, cfg, tag)
        rows = rows + evaluate_run(ft_dir, enc, settings, cfg.data_dir, ckpt, label=f"{enc}+{m or 'direct'} ft")[0]
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


# ---- does the model use the longer context? ------------------------------------------
def context_sources(enc, run_dir, settings):
    """{label: (folder, model overrides)} measured by context_use for this run: its own label
    when context_use is on, and each of context_labels that names one of its variants
    ("<enc>+<method>": the run with that scaling; "<enc>+<method> ft": that fine-tune)."""
    if not settings["context_use"]:
        return {}
    out = {enc: (run_dir, None)}
    for label in settings["context_labels"]:
        e, method, ft = parse_label(label)
        if e != enc or not method:
            continue
        out[label] = ((f"{run_dir}-ft-{method}", None) if ft else
                      (run_dir, {"rope_scaling": method, "rope_factor": settings["rope_factor"]}))
    return out


def context_run(enc, run_dir, settings, data_dir, train_len):
    """{label: {"gain": rows, "curve": list}} of context_use.measure for each of
    context_sources, scored on the validation tokens against contexts of train_len (the
    pretraining length, also for a fine-tune at s L); cached in <run>/context.json."""
    from measure import context_use
    sources = context_sources(enc, run_dir, settings)
    if not sources:
        return {}
    key = dict(tokens=settings["context_tokens"], sequences=settings["context_sequences"],
               rope_factor=settings["rope_factor"], labels=sorted(sources),
               iters={label: checkpoint.load(d)["iter_num"] for label, (d, _) in sources.items()})
    path = os.path.join(run_dir, "context.json")
    if os.path.exists(path):
        with open(path) as f:
            cached = json.load(f)
        if cached.get("settings") == key:
            return cached["context"]
    device = pick_device(settings["eval_device"])
    dtype = pick_dtype(settings["eval_dtype"], device.split(":")[0])
    out = {}
    for label, (folder, overrides) in sources.items():
        ckpt = checkpoint.load(folder)
        model = checkpoint.build_model(ckpt, overrides, device, strict=False)
        tokens, _ = evaluation.validation_tokens(ckpt, data_dir, "val")
        with autocast(device, dtype):
            got = context_use.measure(model, tokens, train_len, scored_tokens=settings["context_tokens"],
                                      sequences=settings["context_sequences"], device=device)
        out[label] = {"gain": got["gain"], "curve": None if got["curve"] is None else got["curve"].tolist()}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"settings": key, "context": out}, f, default=float)
    os.replace(tmp, path)
    return out


# ---- the comparison -------------------------------------------------------------------
def one_run(i, enc, seed, run_dir, done, settings, train_keys, cfg, n_runs):
    """Train (or resume) one run, evaluate it and its fine-tunes; -> its result dict."""
    tag = f"[{i + 1}/{n_runs} {enc} s{seed}]"
    if done < cfg.max_iters:
        cmd = train_command(train_keys, settings, enc, seed, run_dir, resume=done > 0)
        print(f"{tag} " + (f"resuming from iter {done}" if done else "training"), flush=True)
        os.makedirs(run_dir, exist_ok=True)
        t0 = time.time()
        train_run(cmd, os.path.join(run_dir, "train.out"), tag, settings["threads"])
        print(f"{tag} trained in {fmt_time(time.time() - t0)}", flush=True)
    else:
        print(f"{tag} already trained ({done} iters): training skipped", flush=True)
    ckpt = checkpoint.load(run_dir)  # loaded once, for the evaluation and wandb
    rows, fresh = evaluate_run(run_dir, enc, settings, cfg.data_dir, ckpt)
    rows = finetune_rows(run_dir, ckpt["iter_num"], enc, seed, settings, train_keys, cfg, tag, rows)
    print(f"{tag} " + ("evaluated" if fresh else "evaluation cached: skipped") + ": " + ", ".join(
        f"ppl@{r['length']} {r['ppl']:.2f}" for r in rows if r["label"] == enc), flush=True)
    if cfg.wandb_log and fresh:
        log_eval_to_wandb(ckpt["config"], rows, enc, seed, settings)
    context = context_run(enc, run_dir, settings, cfg.data_dir, cfg.block_size)
    cmd = ["python"] + train_command(train_keys, settings, enc, seed, run_dir, resume=False)[1:]
    return dict(encoding=enc, seed=seed, run_dir=run_dir, rows=rows, context=context, command=shlex.join(cmd))


def main(argv):
    if {"-h", "--help"} & set(argv):
        print(__doc__ + "\nKeys of compare.py: " + ", ".join(DEFAULTS) + "; any other key is a training key "
              "(config.py).")
        return
    try:
        settings, train_keys, cfg = parse(argv)
        runs = [(enc, seed, os.path.join(settings["out_root"], f"{enc}-s{seed}"))
                for enc in settings["encodings"] for seed in settings["seed_list"]]
        done = {run_dir: trained_iters(run_dir, dict(train_keys, **run_keys(enc, settings)), cfg)
                for enc, _, run_dir in runs}  # checked up front
    except (ValueError, FileNotFoundError) as e:
        fail(e)
    import torch
    torch.set_num_threads(settings["threads"])  # the in-process evaluations share the cores like the runs
    to_train = sum(done[d] < cfg.max_iters for _, _, d in runs)
    print(f"compare: {len(runs)} runs ({', '.join(settings['encodings'])} x seeds {settings['seed_list']}), "
          f"{to_train} to train, {cfg.max_iters} iters of {cfg.batch_size * cfg.block_size:,} tokens each, "
          f"{settings['jobs']} side by side with {settings['threads']} thread(s) each, in {settings['out_root']}/",
          flush=True)
    t0, results, failed = time.time(), {}, []

    def one(i):
        enc, seed, run_dir = runs[i]
        try:
            results[i] = one_run(i, enc, seed, run_dir, done[run_dir], settings, train_keys, cfg, len(runs))
        except (ValueError, RuntimeError, FileNotFoundError) as e:  # one broken run does not stop the others
            print(f"[{i + 1}/{len(runs)} {enc} s{seed}] error: {e}", file=sys.stderr, flush=True)
            failed.append((enc, seed, str(e)))

    with ThreadPoolExecutor(settings["jobs"]) as pool:
        list(pool.map(one, range(len(runs))))
    print(f"compare: {len(runs)} runs in {fmt_time(time.time() - t0)}", flush=True)
    paths = compare_report.write([results[i] for i in sorted(results)], failed, settings, cfg,
                                 command=shlex.join(["python", "compare.py", *argv]))
    print(f"compare: report in {paths['md']}" + (f"; {len(failed)} run(s) failed" if failed else ""), flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
