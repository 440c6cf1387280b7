"""The fine-tune protocol of a comparison (PI: Chen et al. 2023; YaRN: Peng et al. 2023): which runs are
fine-tuned with which RoPE method, at s L for each budget, and the labels of their rows ("rope+yarn ft100")."""
import json
import os
import shutil

import positional
from positional import rope_scaling
from training import checkpoint
from training.config import ConfigError
from comparison.runs import run_keys, train

# A new method: its name here (unless it is a rope_scaling) and its train.py arguments in finetune_args.
# "direct": no scaling (PI's control); "longlora": LongLoRA's (PI's interpolation, LoRA and S²-Attn:
# training/longlora.py), with finetune_longlora; "drope": DroPE's (the rotation dropped, then recalibrated at
# the pretraining length L: training/drope.py), when finetune_methods names it. DroPE is chosen in
# finetune_methods rather than by a key of its own: a key added to compare.py's DEFAULTS enters every kept run's
# key (compare.py's NOT_MEASURED), so a new one would orphan the runs kept so far; [] still means every frequency
# method of rope_scalings, and drope, which has no evaluation-time form, runs only where it is named. A list that
# names anything runs what it names: ["drope"] is direct and DroPE, no frequency method.
FINETUNE_ONLY = ["direct", "longlora", "drope"]
NAMED_ONLY = ["drope"]   # fine-tunes of finetune_methods that are not rope_scalings


def takes(name, method, settings):
    """Whether the runs of `name` (an encoding or a variant) are evaluated and fine-tuned with the RoPE method."""
    wanted = settings["scaled_encodings"]
    enc = run_keys(name, settings)["pos_encoding"]
    reference = name == settings.get("reference")   # measured as trained (lm; the task suite has none)
    return positional.scaling_problem(enc, method) is None and (not wanted or name in wanted) and not reference


def scaling_keys(method, settings):
    """The evaluation-time model keys of a RoPE method: its name and factor (rope_factors', else rope_factor)."""
    return {"rope_scaling": method, "rope_factor": settings["rope_factors"].get(method, settings["rope_factor"])}


def parse_label(label):
    """"rope+yarn ft100" -> ("rope", "yarn", 100); "rope" -> ("rope", "", 0); ft is None for another suffix."""
    head, _, tail = label.partition(" ")
    enc, _, method = head.partition("+")
    if not tail:
        return enc, method, 0
    return enc, method, int(tail[2:]) if tail[:2] == "ft" and tail[2:].isdigit() else None


def check_finetune(settings, cfg):
    """finetune_iters (a number or a list) -> its budgets in increasing order; finetune_len and finetune_batch
    (s L tokens a sequence, batch_size / s sequences: the same tokens an iteration as pretraining); rope_factors."""
    budgets, s = settings["finetune_iters"], settings["finetune_factor"]
    if any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in budgets) or s * cfg.block_size < 1:
        raise ConfigError(f"need --finetune_iters as iteration counts >= 0 (e.g. 100 or [5,25,100]; 0: none) and "
                          f"--finetune_factor > 0; got {budgets}, {s}")
    settings["finetune_iters"] = sorted({n for n in budgets if n})
    settings["finetune_len"] = round(s * cfg.block_size) * bool(settings["finetune_iters"])
    settings["finetune_batch"] = finetune_batch(settings, cfg)
    wanted = [m for m in settings["finetune_methods"] if m not in (*rope_scaling.METHODS, *NAMED_ONLY)]
    if wanted:   # (one not among rope_scalings is not fine-tuned, as it is not evaluated)
        raise ConfigError(f"finetune_methods: {', '.join(map(str, wanted))} not a frequency method; use some of "
                          f"{', '.join(rope_scaling.METHODS)}, or {', '.join(NAMED_ONLY)} (a fine-tune alone)")
    factors = settings["rope_factors"]
    if not isinstance(factors, dict) or any(m not in positional.SCALINGS or not isinstance(f, (int, float)) or f <= 0
                                            for m, f in factors.items()):
        raise ConfigError(f"rope_factors: need {{method: factor > 0}} with methods of "
                          f"{', '.join(positional.SCALINGS)}, e.g. {{'dynamic': 1.0}}; got {factors!r}")


def finetune_methods(enc, settings):
    """The fine-tunes of one encoding: FINETUNE_ONLY's and each frequency method of rope_scalings it
    takes; none when fine-tuning is off or the encoding takes no scaling."""
    if not (settings["finetune_iters"] or settings["finetune_steps"]) or not takes(enc, "linear", settings):
        return []
    chosen = settings["finetune_methods"] or settings["rope_scalings"]   # []: every frequency method
    methods = [m for m in settings["rope_scalings"] if m in rope_scaling.METHODS and takes(enc, m, settings)
               and m in chosen]
    drope = "drope" in settings["finetune_methods"]
    return ["direct"] + methods + ["longlora"] * settings["finetune_longlora"] + ["drope"] * drope


def finetune_args(method, settings, cfg):
    """train.py's arguments of a fine-tune beyond the run's own: s L tokens per sequence, batch_size / s
    sequences (the same tokens per iteration), the final learning rate held, and the method's scaling from L.
    DroPE recalibrates at L itself (the paper's original context length), batch_size sequences: the same tokens."""
    if method == "drope":
        return [f"--block_size={cfg.block_size}", f"--batch_size={cfg.batch_size}", "--decay_lr=False",
                f"--learning_rate={cfg.min_lr!r}", "--drop_positions=True"]
    args = [f"--block_size={settings['finetune_len']}", f"--batch_size={finetune_batch(settings, cfg)}",
            "--decay_lr=False", f"--learning_rate={cfg.min_lr!r}"]
    scaling = "linear" if method == "longlora" else method
    if scaling in rope_scaling.METHODS:
        keys = finetune_scaling(scaling, settings)
        args += [f"--rope_scaling={scaling}", f"--rope_factor={keys['rope_factor']!r}",   # L: the pretraining length,
                 f"--rope_original_max_position={cfg.block_size}"]        # also when resuming a fine-tune at s L
    return args + ["--finetune_method=longlora"] * (method == "longlora")


def finetune_scaling(method, settings):
    """The model keys of a RoPE method at the fine-tuning length: its name, its rope_factors factor or
    finetune_factor."""
    return {"rope_scaling": method, "rope_factor": settings["rope_factors"].get(method, settings["finetune_factor"])}


def finetune_batch(settings, cfg):
    """Sequences per fine-tune iteration: batch_size / s (s = finetune_factor), as many tokens as in pretraining."""
    return max(1, round(cfg.batch_size / settings["finetune_factor"]))


def ft_dir(run_dir, method, budget):
    return f"{run_dir}-ft-{method}-{budget}"


def finetune(run, base_iter, method, budget, settings, train_keys, cfg):
    """Fine-tune the run's checkpoint (at base_iter) for `budget` iterations in a folder of its own; -> the folder.
    The budgets of a method (finetune_iters, or the task suite's finetune_steps) are one fine-tune observed at
    each (as PI's Table 4 by steps): a budget starts from a copy of the next smaller one's checkpoint (the
    pretrained run's for the smallest; the learning rate is constant), so the sweep costs the largest budget; a
    copy made along other budgets is made again."""
    below = [b for b in settings["finetune_iters"] or settings["finetune_steps"] if b < budget]
    prev = below[-1] if below else 0
    ft = dict(run, dir=ft_dir(run["dir"], method, budget), tag=f"{run['tag']}-ft-{method}-{budget}",
              say=f"{run['say'][:-1]} ft{budget} {method}]")
    marker, source = os.path.join(ft["dir"], "finetuned_from.json"), {"iter_num": base_iter, "budgets": below}
    if not os.path.exists(marker) or json.load(open(marker)) != source:
        os.makedirs(ft["dir"], exist_ok=True)   # a copy, so the pretrained run stays as it is; a stale one replaced
        shutil.copyfile(checkpoint.path_in(ft_dir(run["dir"], method, prev) if prev else run["dir"]),
                        checkpoint.path_in(ft["dir"]))
        with open(marker, "w") as f:
            json.dump(source, f)
    ft["done"] = checkpoint.load(ft["dir"])["iter_num"]
    target = base_iter + budget
    length = cfg.block_size if method == "drope" else settings["finetune_len"]   # DroPE: at L (finetune_args)
    train(ft, settings, train_keys, target, finetune_args(method, settings, cfg) + [f"--max_iters={target}"],
          f"fine-tuning at {length}")
    return ft["dir"]
