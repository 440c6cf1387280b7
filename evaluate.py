"""Perplexity against evaluation length, past the training length (measure/evaluation.py has the
method: Press et al. 2022, "Train Short, Test Long", https://arxiv.org/abs/2108.12409).

    python evaluate.py out-rope out-alibi                        # 1, 2, 4, 8, 16 x block_size
    python evaluate.py out-rope out-alibi --lengths=64,256,1024 --mode=sliding --stride=32
    python evaluate.py out-rope --rope_scaling=base,linear,ntk,yarn --rope_factor=4
    python evaluate.py out-alibi --window=64 --sinks=4 --report_dir=reports
    python evaluate.py out-task-copy --samples=100               # a task checkpoint: accuracy
    python evaluate.py out-task-passkey --depths=0,0.5,1         # passkey: also length x depth
    python evaluate.py out-task-mqar --distance=True             # passkey, mqar: also by key-query distance
    python evaluate.py out-code --documents=200                  # per document: the first L tokens of each
    python evaluate.py out-code --data=my_src/ --documents=100   # your files, with the checkpoint's tokenizer
    python evaluate.py out-rope out-alibi --retrieval_probe=True    # is a span d tokens back used? d = L/4 .. 16L
    python evaluate.py out-rope --retrieval_probe=0.5,2,8 --probe_spans=64   # distances in units of L

The model is the checkpoint's; only evaluation-time keys (config.EVAL_KEYS) may override it, and
--rope_scaling takes a comma list ("base": none). Writes extrapolation.{csv,md,png} to --report_dir
(--overwrite=True replaces an earlier one). docs/extrapolation.md says more.
"""
import os
import sys

from training import checkpoint
from training import cpu_threads
import positional
from training.cli import as_list, autocast, check_lows, fail, help_text, parse, pick_device, pick_dtype
from training.config import ConfigError, eval_key, model_config, split_settings
from measure import context_use, ngram, retrieval_probe
from measure.evaluation import (MULTIPLES, TOKENS_PER_POINT, check_overrides, documents_note, evaluate_checkpoint,
                                fmt_num, log_wandb, report_paths, scored_note, scored_targets, table_lines,
                                validation_tokens, write_report)
from tasks import report as task_report, score as task_score

OPTIONS = {
    "lengths": [],                    # evaluation lengths (tokens); []: 1, 2, 4, 8, 16 x block_size
    "mode": "nonoverlap",             # nonoverlap or sliding windows
    "stride": 0,                      # sliding: the windows' stride; 0: length // 2
    "tokens_per_point": TOKENS_PER_POINT,   # targets scored per (checkpoint, method, length), at least
    "device": "auto",                 # auto: cuda, then mps, then cpu
    "dtype": "auto",                  # auto: bfloat16 on CUDA where supported, else float32
    "data_dir": "",                   # where the dataset is; "": the one recorded in the checkpoint
    "report_dir": "",                 # where the report goes; "": the first checkpoint's folder
    "overwrite": False,               # replace the report of an earlier call
    "wandb_log": False,               # log the curve to wandb, in the training run's group
    "context_gain": False,            # also write context_gain.{csv,md} (context_use.py)
    "per_position": False,            # also write per_position.{csv,png} (context_use.py)
    "threads": 0,                     # CPU threads; 0: one per core that other work leaves idle
    "samples": task_score.SAMPLES,    # task checkpoints: examples scored per point
    "depths": list(task_score.DEPTHS),  # passkey checkpoints: where the key sits, 0 (start) to 1 (end)
    "distance": False,                # passkey, mqar checkpoints: also exact match by key-query distance (bins of L)
    "documents": 0,                   # score per document: the first L tokens of at most N documents; 0: off
    "data": "",                       # files/folders to score instead (one document each, the checkpoint's tokenizer)
    "retrieval_probe": [],            # probe distances in units of L (True: L/4 .. 16L); writes retrieval_probe.*
    "probe_spans": retrieval_probe.SPANS,  # retrieval probe: windows per distance (the same for every checkpoint)
}
USAGE = "python evaluate.py OUT_DIR [OUT_DIR ...] [--key=value ...]"


def parse_args(argv):
    """-> (out_dirs, options, methods); methods: one overrides dict per --rope_scaling entry."""
    doc = lambda: help_text(__doc__, USAGE, OPTIONS, [sys.modules[__name__]], eval_keys=True)  # noqa: E731
    model_key = lambda k, v: v if k == "rope_scaling" else eval_key(k, v, OPTIONS)  # noqa: E731
    opts, overrides, out_dirs = parse(argv, OPTIONS, model_key, positionals=True, doc=doc)
    scalings = overrides.pop("rope_scaling", "")   # a comma list, or a Hugging Face style dict
    if isinstance(scalings, dict):
        fields, flat = split_settings({"rope_scaling": scalings})
        overrides.update(flat)
        scalings = [fields["rope_scaling"]]
    scalings = ["" if s in ("base", "none") else s for s in as_list(scalings)] or [""]
    for s in scalings:
        if s and s not in positional.SCALINGS:
            raise ConfigError(f"unknown rope_scaling {s!r}; valid: base, {', '.join(positional.SCALINGS)}")
    if not out_dirs:
        raise ConfigError("give one or more checkpoint folders: python evaluate.py out-rope out-alibi")
    if any(not isinstance(n, int) or isinstance(n, bool) for n in opts["lengths"]):
        raise ConfigError(f"--lengths wants integers separated by commas, got {opts['lengths']!r}")
    if any(not isinstance(x, (int, float)) or not 0 <= x <= 1 for x in opts["depths"]):
        raise ConfigError(f"--depths wants numbers in [0, 1], got {opts['depths']}")
    check_lows(opts, {"samples": 1, "threads": 0, "probe_spans": 2})
    opts["retrieval_probe"] = probe_multiples(opts["retrieval_probe"])
    opts["lengths"] = opts["lengths"] or None
    check_overrides(overrides)
    return out_dirs, opts, [dict(overrides, **({"rope_scaling": s} if s else {})) for s in scalings]


def probe_multiples(values):
    """--retrieval_probe's values -> distances in units of L ([True]: the default ones, []: off)."""
    if values == [True]:
        return list(retrieval_probe.DISTANCES)
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 for v in values):
        raise ConfigError(f"--retrieval_probe wants True or distances in units of L separated by commas "
                          f"(e.g. 0.25,1,4), got {values!r}")
    return values


def check(ckpts, methods):
    """Every override on every checkpoint, and every --rope_scaling on at least one, before anything is scored."""
    base = {k: v for k, v in methods[0].items() if k != "rope_scaling"}
    for c in ckpts.values():
        model_config(c["model_args"], base, strict=False)
    for kind in {m.get("rope_scaling") for m in methods} - {None}:
        if all(positional.scaling_problem(c["model_args"]["pos_encoding"], kind) for c in ckpts.values()):
            takers = ", ".join(n for n in positional.REGISTRY if positional.scaling_problem(n, kind) is None)
            raise ConfigError(f"--rope_scaling={kind} needs a checkpoint of {takers}; none of "
                              f"{', '.join(ckpts)} is one: drop it from --rope_scaling")


def evaluate_all(ckpts, methods, opts, budget, device, dtype):
    """(rows, {label: context gain rows}, {label: per-position curve}, {label: [retrieval probe rows]}) of every
    (checkpoint, method)."""
    rows, gains, curves, probes = [], {}, {}, {}
    for d, ckpt in ckpts.items():
        for overrides in methods:
            kind, enc = overrides.get("rope_scaling"), ckpt["model_args"]["pos_encoding"]
            if kind and positional.scaling_problem(enc, kind) is not None:
                print(f"note: {d} ({enc}) does not take rope_scaling={kind}; skipped for it", file=sys.stderr)
                continue
            new = evaluate_checkpoint(d, opts["lengths"], opts["mode"], opts["stride"] or None, overrides, budget,
                                      device, opts["data_dir"] or None, dtype, ckpt=ckpt,
                                      documents=opts["documents"], data_path=opts["data"])
            for r in new:
                docs = f", {r['docs']} documents" if r["docs"] is not None else ""
                print(f"{d:>20} {r['encoding']:>10} {r['method']:>24} {r['length']:>6}: loss {fmt_num(r['loss'])}, "
                      f"ppl {fmt_num(r['ppl'])}, bits/byte {fmt_num(r['bpb'])}{docs}", flush=True)
            rows += new
            if opts["context_gain"] or opts["per_position"]:   # context_use.py's measures, on the val tokens
                model = checkpoint.build_model(ckpt, overrides, device, strict=False)
                tokens, _ = validation_tokens(ckpt, opts["data_dir"] or None)
                with autocast(device, dtype):
                    got = context_use.measure(model, tokens, ckpt["model_args"]["block_size"], opts["context_gain"],
                                              opts["per_position"], opts["tokens_per_point"], device=device)
                label = f"{os.path.basename(os.path.normpath(d))} {new[0]['method']}"
                gains.update({label: got["gain"]} if got["gain"] is not None else {})
                curves.update({label: got["curve"]} if got["curve"] is not None else {})
            if opts["retrieval_probe"]:   # the same windows for every checkpoint of a dataset (seeded by distance)
                model = checkpoint.build_model(ckpt, overrides, device, strict=False)
                tokens, _ = validation_tokens(ckpt, opts["data_dir"] or None)
                train_len = ckpt["model_args"]["block_size"]
                dists = retrieval_probe.distances(train_len, opts["retrieval_probe"])
                with autocast(device, dtype):
                    got = retrieval_probe.measure(model, tokens, train_len, dists, opts["probe_spans"], device=device)
                probes[f"{os.path.basename(os.path.normpath(d))} {new[0]['method']}"] = [got]
    return rows, gains, curves, probes


def main(argv):
    try:
        out_dirs, opts, methods = parse_args(argv)
        ckpts = {d: checkpoint.load(d) for d in out_dirs}
        on_task = [bool(c["config"].get("task")) for c in ckpts.values()]
        if any(on_task) and not all(on_task):
            raise ConfigError("give task checkpoints (train.py --task=...) or dataset checkpoints, not both")
        if opts["distance"] and not all(on_task):
            raise ConfigError("--distance scores task checkpoints (passkey, mqar) by key-query distance; for a "
                              "dataset checkpoint use --retrieval_probe=True")
        report_dir = opts["report_dir"] or out_dirs[0]
        paths = [os.path.join(report_dir, "task_scores.md")] if all(on_task) else report_paths(report_dir).values()
        earlier = [p for p in paths if os.path.exists(p)]
        if earlier and not opts["overwrite"]:
            raise ConfigError(f"{earlier[0]} holds an earlier evaluation; keep it with another --report_dir=..., "
                              f"or replace it with --overwrite=True")
        device = pick_device(opts["device"])
        dtype = pick_dtype(opts["dtype"], device.split(":")[0])
        if all(on_task):   # accuracy against length (tasks/score.py)
            if len(methods) > 1:
                raise ConfigError("task checkpoints are scored with one setting at a time: give one --rope_scaling")
            out = task_score.score_checkpoints(list(ckpts), methods[0], opts["lengths"], opts["samples"],
                                               opts["depths"], device, ckpts, opts["distance"])
            print(f"wrote {task_report.write_scores(out, report_dir)}")
            return out
        check(ckpts, methods)
        blocks = {c["model_args"]["block_size"] for c in ckpts.values()}
        budget = max(opts["tokens_per_point"], *(opts["lengths"] or [MULTIPLES[-1] * b for b in blocks]))  # same tokens
        threads = cpu_threads.choose(opts["threads"], device)
        counts = [] if opts["documents"] else [
            scored_targets(c, opts["lengths"], budget, opts["data_dir"] or None, opts["data"]) for c in ckpts.values()]
        note = documents_note(opts["documents"]) if opts["documents"] else scored_note((min(counts), max(counts)))
        print(f"evaluating on {device} ({dtype}{'; ' + threads if threads else ''}): {note}", flush=True)
        rows, gains, curves, probes = evaluate_all(ckpts, methods, opts, budget, device, dtype)
        baselines = [] if opts["documents"] else ngram.baseline_rows(   # count models on the same targets
            *ngram.checkpoint_data(next(iter(ckpts.values())), opts["data_dir"] or None, opts["data"]),
            sorted({r["length"] for r in rows}), budget, opts["mode"], opts["stride"] or None)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        fail(e)
    train_len = blocks.pop() if len(blocks) == 1 else None
    paths = write_report(rows + baselines, report_dir, train_len,
                         title=f"Perplexity against evaluation length ({opts['mode']})")
    print("\n" + "\n".join(table_lines(rows + baselines)))
    print(f"\n({note})\nwrote {paths['md']}, {paths['csv']}, {paths['png']}")
    if opts["wandb_log"]:
        log_wandb(rows, next(iter(ckpts.values()))["config"], report_dir, paths["png"])
    if gains:
        print("\n" + "\n".join(context_use.gain_table_lines(gains)))
        print("wrote " + ", ".join(context_use.write_context_gain(gains, report_dir).values()))
    if curves:
        print("wrote " + ", ".join(context_use.write_per_position(curves, report_dir, train_len).values()))
    if probes:
        unit = train_len or min(c["model_args"]["block_size"] for c in ckpts.values())   # the table's d / L
        print("\n" + "\n".join(retrieval_probe.table_lines(probes, unit)))
        print("wrote " + ", ".join(retrieval_probe.write(probes, report_dir, unit).values()))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
