"""The comparison's "lm" suite: perplexity against length (measure/evaluation.py) of each run as trained, with
each method of rope_scalings and after each fine-tune (comparison/finetune.py), its context use with context_use
(comparison/context.py), the n-gram rows of its dataset (measure/ngram.py), and the report
(measure/compare_report.py), and with retrieval_probe the retrieval probe (comparison/probe.py). The suite
interface compare.py calls: OUT_ROOT, check, measure, complete, result, report."""
import itertools
import os
import shlex

import positional
from measure import compare_report, evaluation, kept, ngram
from training import checkpoint
from training.cli import check_lows
from training.config import FIELDS, Config, ConfigError
from training.wandb_util import start_wandb
from comparison import probe
from comparison.context import add_reference, context_run
from comparison.finetune import (FINETUNE_ONLY, check_finetune, finetune, finetune_methods, parse_label,
                                 scaling_keys, takes)
from comparison.runs import cached, check_over, run_keys, train, train_command

OUT_ROOT = "out-compare"   # the runs' folder unless out_root says


def check(settings, train_keys, cfg):
    """The lm keys checked and completed (rope_factor, finetune_factor, the reference run) before anything runs."""
    lengths = settings["eval_lengths"]
    if not lengths or any(not isinstance(n, int) or n < 1 for n in lengths):
        raise ConfigError(f"need positive integer eval_lengths; got {lengths}")
    settings["rope_factor"] = settings["rope_factor"] or max(lengths) / cfg.block_size
    settings["finetune_factor"] = settings["finetune_factor"] or settings["rope_factor"]
    check_finetune(settings, cfg)
    check_lows(settings, {"context_targets": 1})
    probe.check(settings, cfg)
    add_reference(settings, cfg)
    for keys in settings["variants"].values():
        check_over(train_keys, keys)
    known = [*positional.REGISTRY, *settings["variants"]]
    if any(e not in known for e in settings["scaled_encodings"]):
        raise ConfigError(f"scaled_encodings: unknown name in {settings['scaled_encodings']}; "
                          f"valid: {', '.join(known)}")
    for label in settings["context_labels"]:   # measured for the runs that have a row of that label
        enc, method, ft = parse_label(label)
        if ft is None or enc not in known or method not in (*positional.SCALINGS, *(FINETUNE_ONLY if ft else [])):
            raise ConfigError(f"context_labels: {label!r} is not a label of this comparison; use '<encoding>+<method>'"
                              f" or '<encoding>+<method> ftN' (N a budget of finetune_iters) for a compared encoding "
                              f"and a method of rope_scalings")
        if method not in FINETUNE_ONLY and positional.scaling_problem(run_keys(enc, settings)["pos_encoding"], method):
            raise ConfigError(f"context_labels: {label!r} names a method that {enc} does not take")


def evaluate_run(run_dir, enc, settings, data_dir, ckpt, label=None):
    """(rows, computed now) of evaluation.evaluate_checkpoint at every eval length, each with its
    label: `label` alone (a fine-tune), else the encoding and "<enc>+<method>" per method it takes."""
    key = {k: settings[k] for k in ("eval_lengths", "eval_tokens", "eval_mode", "rope_factor", "rope_factors")}
    key.update(iter_num=ckpt["iter_num"], targets=evaluation.TARGETS)  # a run trained further is evaluated again
    key["rope_scalings"] = [m for m in settings["rope_scalings"] if label is None and takes(enc, m, settings)]
    variants = [(label or enc, None)] + [(f"{enc}+{m}", scaling_keys(m, settings)) for m in key["rope_scalings"]]
    return cached(os.path.join(run_dir, "results.json"), key, lambda: [
        dict(row, label=name) for name, overrides in variants
        for row in evaluation.evaluate_checkpoint(run_dir, key["eval_lengths"], mode=key["eval_mode"],
                                                  overrides=overrides, tokens_per_point=key["eval_tokens"],
                                                  device=settings["eval_device"], data_dir=data_dir,
                                                  dtype=settings["eval_dtype"], ckpt=ckpt)])


def log_eval_to_wandb(ckpt_cfg, rows, run, settings):
    """The evaluation curve of one run as a wandb table and line plot, in the comparison's group."""
    cfg = Config(**{k: v for k, v in ckpt_cfg.items() if k in FIELDS})
    cfg.wandb_group, enc = settings["wandb_group"], run["encoding"]
    wb = start_wandb(cfg, job_type="eval", name=f"{run['tag']}-eval")
    if wb is None:
        return
    import wandb
    table = wandb.Table(columns=["label", "length", "loss", "ppl"],
                        data=[[r["label"], r["length"], r["loss"], r["ppl"]] for r in rows])
    wb.log({"eval/ppl_by_length": table,
            "eval/ppl_plot": wandb.plot.line(table, "length", "ppl", stroke="label", title=f"{enc}: ppl vs length")})
    for r in rows:
        wb.summary[f"eval/ppl@{r['length']}" + ("" if r["label"] == enc else f"/{r['label']}")] = r["ppl"]
    wb.finish()


def measure(run, settings, train_keys, cfg):
    """Train (or resume) one run, evaluate it and its fine-tunes -> what compare.py keeps of it (measure/kept.py):
    its rows, context use, retrieval probe (with retrieval_probe) and training command."""
    enc = run["encoding"]
    train(run, settings, train_keys, cfg.max_iters)
    ckpt = checkpoint.load(run["dir"])  # loaded once, for the evaluation and wandb
    rows, fresh = evaluate_run(run["dir"], enc, settings, cfg.data_dir, ckpt)
    methods, budgets = finetune_methods(enc, settings), settings["finetune_iters"]
    for m, n in itertools.product(methods, budgets):   # a method's budgets in increasing order (finetune)
        folder = finetune(run, ckpt["iter_num"], m, n, settings, train_keys, cfg)
        ft_ckpt = checkpoint.load(folder)
        got = evaluate_run(folder, enc, settings, cfg.data_dir, ft_ckpt, f"{enc}+{m} ft{n}")[0]
        rows += [dict(r, trained_params=ft_ckpt["lora"]["trained_params"]) if "lora" in ft_ckpt else r for r in got]
    order = [enc] + [f"{enc}+{m}{ft}" for m in methods for ft in ("", *(f" ft{n}" for n in budgets))]
    rows.sort(key=lambda r: order.index(r["label"]) if r["label"] in order else len(order))
    print(f"{run['say']} " + ("evaluated" if fresh else "evaluation cached: skipped") + ": " + ", ".join(
        f"ppl@{r['length']} {r['ppl']:.2f}" for r in rows if r["label"] == enc), flush=True)
    if cfg.wandb_log and fresh:
        log_eval_to_wandb(ckpt["config"], rows, run, settings)
    context = context_run(run, {r["label"] for r in rows}, settings, cfg) if settings["context_use"] else {}
    command = shlex.join(["python"] + train_command(train_keys, run, settings, resume=False)[1:])
    got = dict(rows=rows, context=context, command=command)
    if settings["retrieval_probe"]:
        got["probe"] = probe.probe_run(run, {r["label"] for r in rows}, settings, cfg)
    return got


complete = probe.complete   # a kept result without the probe this call asks for (comparison/probe.py)


def result(run, got, where):
    """The report's dict of a run from what is kept of it (in `where`); its folder is `where` when the run's own
    checkpoint is not on this machine."""
    return dict(run, **got, dir=run["dir"] if os.path.exists(checkpoint.path_in(run["dir"])) else where)


def baselines(results, settings, cfg):
    """measure/ngram.py's rows of the runs' dataset, fitted on its training split and scored on the evaluation's
    targets; kept in <report_dir>/runs/ngram.json, keyed on both (without a checkpoint, every run kept from
    elsewhere: the kept rows of the same settings, or none)."""
    keys = dict(lengths=settings["eval_lengths"], tokens_per_point=settings["eval_tokens"], mode=settings["eval_mode"])
    key = dict(keys, dataset=cfg.dataset, orders=ngram.ORDERS, d=ngram.D, targets=evaluation.TARGETS)
    path = os.path.join(settings["report_dir"], "runs", "ngram.json")
    have = [r["dir"] for r in results if os.path.exists(checkpoint.path_in(r["dir"]))]
    if not have:
        got = kept.read_json(path)
        same = {k: v for k, v in got.get("settings", {}).items() if k != "data"} == kept.as_json(key)
        return got["value"] if same else []
    data = ngram.checkpoint_data(checkpoint.load(have[0]), cfg.data_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return cached(path, dict(key, data=ngram.fingerprint(*data[:2])), lambda: ngram.baseline_rows(*data, **keys))[0]


def report(done, failed, settings, cfg, command, elapsed):
    """The lm report folder (measure/compare_report.py) of the finished runs, with the n-gram rows -> report.md."""
    ngrams = baselines(done, settings, cfg) if done else []
    return compare_report.write(done, failed, settings, cfg, command, ngrams)
