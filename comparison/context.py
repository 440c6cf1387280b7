"""Context use in the lm suite (measure/context_use.py): the reference run trained at s L, and each run's
context gain, per-position loss and in-range curve, as trained and for the labels of context_labels."""
import os

import positional
from measure import context_use, evaluation
from training import checkpoint
from training.cli import autocast
from training.config import ConfigError
from comparison.finetune import ft_dir, parse_label, scaling_keys
from comparison.runs import cached, run_keys


def add_reference(settings, cfg):
    """With context_use, the run of context_reference (an encoding or variant) trained at s L (s = finetune_factor)
    with batch_size / s sequences per iteration, as the variant "<enc>_<s>L": the reference for context gain past
    L, measured as trained (no extension method, no fine-tune)."""
    enc, s = settings["context_reference"], settings["finetune_factor"]
    settings["reference"], settings["reference_len"] = "", 0
    if not (settings["context_use"] and enc):
        return
    if enc not in positional.REGISTRY and enc not in settings["variants"]:
        raise ConfigError(f"context_reference: unknown encoding {enc!r}; use one of {', '.join(positional.REGISTRY)}, "
                          f"a variant, or '' (no reference run)")
    name, length = f"{enc}_{s:g}L", round(s * cfg.block_size)
    keys = dict(run_keys(enc, settings), block_size=length, batch_size=max(1, round(cfg.batch_size / s)))
    settings.update(reference=name, reference_len=length, variants={**settings["variants"], name: keys})
    settings["encodings"] = [e for e in settings["encodings"] if e != name] + [name]


def label_sources(run, labels, settings):
    """{label: (checkpoint folder, model overrides)} of the run as trained and each of context_labels among `labels`
    (a method: the run's own checkpoint with its scaling keys; a fine-tune: its folder)."""
    sources = {run["encoding"]: (run["dir"], None)}
    for label in [label for label in settings["context_labels"] if label in labels]:
        _, method, ft = parse_label(label)
        sources[label] = (ft_dir(run["dir"], method, ft), None) if ft else (run["dir"], scaling_keys(method, settings))
    return sources


def label_models(sources, settings, cfg):
    """(label, checkpoint, model, validation tokens) of each of label_sources' entries in turn, the model built on
    the evaluation device with the label's overrides."""
    for label, (folder, overrides) in sources.items():
        ckpt = checkpoint.load(folder)
        model = checkpoint.build_model(ckpt, overrides, settings["eval_device"], strict=False)
        tokens, _ = evaluation.validation_tokens(ckpt, cfg.data_dir, "val")
        yield label, ckpt, model, tokens


def context_run(run, labels, settings, cfg):
    """{label: {"gain": rows, "curve": list, "in_range": rows, "reference": bool}} of context_use.measure and
    in_range_curve for the run as trained and each of context_labels among its rows' `labels`; cached in
    <run>/context.json. Every in-range curve runs to its label's own training length, on the same targets for
    every label: those after the longest training length of the comparison."""
    sources = label_sources(run, labels, settings)
    longest = max(cfg.block_size, settings["finetune_len"], settings["reference_len"])
    key = dict(tokens=settings["context_tokens"], sequences=settings["context_sequences"],
               targets=settings["context_targets"], targets_from=longest,
               rope_factor=settings["rope_factor"], rope_factors=settings["rope_factors"], labels=sorted(sources),
               iters={label: checkpoint.load(d)["iter_num"] for label, (d, _) in sources.items()})

    def measure():
        out = {}
        for label, ckpt, model, tokens in label_models(sources, settings, cfg):
            with autocast(settings["eval_device"], settings["eval_dtype"]):
                got = context_use.measure(model, tokens, cfg.block_size, scored_tokens=settings["context_tokens"],
                                          sequences=settings["context_sequences"], device=settings["eval_device"])
                own = ckpt["model_args"]["block_size"]   # the curve runs to the label's own training length
                got["in_range"] = context_use.in_range_curve(model, tokens, own, settings["context_targets"], longest,
                                                             settings["eval_device"])
            out[label] = dict(got, curve=None if got["curve"] is None else got["curve"].tolist())
        return out
    got = cached(os.path.join(run["dir"], "context.json"), key, measure)[0]
    return {label: dict(g, reference=label == settings["reference"]) for label, g in got.items()}
