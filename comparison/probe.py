"""The retrieval probe in the lm suite (measure/retrieval_probe.py), with retrieval_probe = True: each run as
trained and each of context_labels among its rows, on windows that depend only on the validation text and the
probe's keys, so every seed and encoding is scored on the same ones (paired). Kept in the run's result as
{"key": probe_key, "rows": {label: measure rows}}, each window's loss rounded to 4 decimals (the unit of the
report's intervals), apart from the kept key, so that results kept before the probe stay valid: a kept result
without the probe of these keys is measured again from its checkpoint when that is on this machine, else its probe
is "not measured" in the report."""
import os

import numpy as np

from measure import kept, retrieval_probe
from training import checkpoint
from training.cli import autocast, check_lows
from training.config import ConfigError
from comparison.context import label_models, label_sources
from comparison.runs import cached

KEYS = ("retrieval_probe", "probe_spans", "probe_span", "probe_distances")   # compare keys of the probe alone
DIGITS = 4                                                                  # decimals of a kept window's loss


def check(settings, cfg):
    """The probe's keys checked before anything runs: positive counts, distances of at least one span."""
    check_lows(settings, {"probe_spans": 2, "probe_span": 2})
    if not settings["probe_distances"] or any(not isinstance(m, (int, float)) or m <= 0
                                              for m in settings["probe_distances"]):
        raise ConfigError(f"probe_distances: need positive multiples of block_size, e.g. "
                          f"{list(retrieval_probe.DISTANCES)}; got {settings['probe_distances']}")


def probe_key(settings, cfg):
    """What a run's probe rows are made with: the windows (distances in tokens, spans, span, seed) and the methods'
    factors."""
    return kept.as_json(dict(distances=retrieval_probe.distances(cfg.block_size, settings["probe_distances"],
                                                                 settings["probe_span"]),
                             spans=settings["probe_spans"], span=settings["probe_span"], seed=0,
                             rope_factor=settings["rope_factor"], rope_factors=settings["rope_factors"]))


def probe_run(run, labels, settings, cfg):
    """{"key", "rows": {label: retrieval_probe.measure rows, losses rounded}} of the run as trained and its
    context_labels among `labels`; cached in <run>/probe.json."""
    sources = label_sources(run, labels, settings)
    key = dict(probe_key(settings, cfg), labels=sorted(sources),
               iters={label: checkpoint.load(d)["iter_num"] for label, (d, _) in sources.items()})

    def measure():
        out = {}
        for label, _, model, tokens in label_models(sources, settings, cfg):
            with autocast(settings["eval_device"], settings["eval_dtype"]):
                rows = retrieval_probe.measure(model, tokens, cfg.block_size, key["distances"], key["spans"],
                                               key["span"], key["seed"], settings["eval_device"])
            out[label] = [dict(r, probe=np.round(r["probe"], DIGITS).tolist(),
                               control=np.round(r["control"], DIGITS).tolist()) for r in rows]
        return out
    rows = cached(os.path.join(run["dir"], "probe.json"), key, measure)[0]
    return dict(key=probe_key(settings, cfg), rows=rows)


def complete(run, got, settings, cfg):
    """(a kept result with the probe this call asks for, whether it changed): the probe measured from the run's
    checkpoint where the kept one is missing or of other keys and the checkpoint here is the kept run's (its
    iterations); else a probe of other keys left out of what is reported ("not measured"), since its windows are
    not the other runs'. Without retrieval_probe, no probe is reported."""
    have = got.get("probe") or {}
    if settings["retrieval_probe"] and have.get("key") == probe_key(settings, cfg):
        return got, False
    if settings["retrieval_probe"] and run["done"] == run["iters"]:
        labels = {r["label"] for r in got["rows"]}
        return dict(got, probe=probe_run(run, labels, settings, cfg)), True
    return {k: v for k, v in got.items() if k != "probe"}, False
