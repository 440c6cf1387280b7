"""Perplexity against evaluation length, past the training length (evaluation.py has the
method: Press et al. 2022, "Train Short, Test Long", https://arxiv.org/abs/2108.12409).

    python evaluate.py out-rope out-alibi                        # 1, 2, 4, 8, 16 x block_size
    python evaluate.py out-rope out-alibi --lengths=64,256,1024 --mode=sliding --stride=32
    python evaluate.py out-rope --rope_scaling=base,linear,ntk,yarn --rope_factor=4
    python evaluate.py out-alibi --window=64 --sinks=4 --report_dir=reports
    python evaluate.py out-code --documents=200                  # per document: the first L tokens of each
    python evaluate.py out-code --data=my_src/ --documents=100   # your files, with the checkpoint's tokenizer

Options (cli.py's convention): lengths, mode (nonoverlap or sliding), stride,
tokens_per_point (8192), device and dtype (auto), data_dir, split (val), report_dir (the
first out dir), overwrite, wandb_log, threads (on a CPU, 0, the default: one per core that
other processes leave idle at the start; see cpu_threads.py). Every point scores the first
tokens_per_point tokens of the split, the same at every length; training's val loss averages
random batches, so the two differ a little. Every row gives bits per byte too. documents=N
(0: off) scores per document instead (at most N documents, each row counts them); data=PATH
scores files or folders (comma-separated, one document each, tokenized with the checkpoint's
tokenizer) or a dataset folder prepared with that tokenizer, instead of the checkpoint's dataset.

Model keys and encoding settings given on the command line (--rope_scaling, --rope_factor,
--window, --sinks, ...) override the checkpoint's at evaluation time. --rope_scaling takes
a comma list; "base" means none. A scaling is skipped, with a note, for the checkpoints
whose encoding does not take it, and refused if no checkpoint given takes it.
Writes extrapolation.{csv,md,png} to --report_dir, and refuses to replace those of an
earlier call unless --overwrite=True.

Context use (context_use.py), for every checkpoint and method: --context_gain=True scores
the same tokens with contexts of 1, 2, 4, 8, 16 x block_size (stride block_size // 2) and
writes context_gain.{csv,md}; --per_position=True writes the mean loss at each position of
sequences of 16 x block_size as per_position.{csv,png}.
"""
import difflib
import os
import sys

from training import checkpoint
from training import cpu_threads
import positional
from training.cli import autocast, fail, parse, pick_device, pick_dtype
from training.config import ConfigError, coerce, is_key, model_config
from measure.evaluation import (MULTIPLES, TOKENS_PER_POINT, check_overrides, documents_note, evaluate_checkpoint,
                                fmt_num, log_wandb, method_label, report_paths, scored_note, table_lines,
                                validation_tokens, write_report)

OPTIONS = dict(lengths=[], mode="nonoverlap", stride=0, tokens_per_point=TOKENS_PER_POINT, device="auto",
               dtype="auto", data_dir="", split="val", report_dir="", overwrite=False, wandb_log=False,
               context_gain=False, per_position=False, threads=0, documents=0, data="")


def model_key(key, value):
    """A key that is not an option: a model key or encoding setting (config.coerce's types)."""
    close = difflib.get_close_matches(key, OPTIONS, n=1, cutoff=0.8)
    if not is_key(key) and close:
        raise ConfigError(f"unknown option --{key}; did you mean --{close[0]}?")
    if key == "rope_scaling":
        return value
    return coerce(key, value)


def parse_args(argv):
    """-> (out_dirs, options, methods); methods: one overrides dict per --rope_scaling entry."""
    opts, overrides, out_dirs = parse(argv, OPTIONS, model_key, positionals=True, doc=__doc__)
    scalings = [""]
    if isinstance(overrides.get("rope_scaling"), dict):   # a Hugging Face style dict: its method and settings
        from positional.rope_scaling.hf import from_hf
        kind, flat = from_hf(overrides.pop("rope_scaling"))
        overrides.update({k: coerce(k, v) for k, v in flat.items()})
        scalings = [kind]
    elif "rope_scaling" in overrides:
        raw = next(a for a in argv if a.startswith("--rope_scaling=")).split("=", 1)[1]
        scalings = ["" if s.strip() in ("base", "none", "") else s.strip() for s in raw.split(",")]
        for s in scalings:
            if s and s not in positional.SCALINGS:
                raise ConfigError(f"unknown rope_scaling {s!r}; valid: base, {', '.join(positional.SCALINGS)}")
        del overrides["rope_scaling"]
    if not out_dirs:
        raise ConfigError("give one or more checkpoint folders: python evaluate.py out-rope out-alibi")
    if any(not isinstance(n, int) or isinstance(n, bool) for n in opts["lengths"]):
        raise ConfigError(f"--lengths wants integers separated by commas, got {opts['lengths']!r}")
    opts["lengths"] = opts["lengths"] or None
    check_overrides(overrides)
    methods = [dict(overrides, **({"rope_scaling": s} if s else {})) for s in scalings]
    return out_dirs, opts, methods


def context_reports(ckpts, methods, opts, device, dtype, report_dir):
    """--context_gain / --per_position: context_use's measures for each (checkpoint, method)
    on the split's tokens, written to report_dir. Returns the paths written."""
    from measure import context_use
    gains, curves, lens = {}, {}, set()
    for d, ckpt in ckpts.items():
        block = ckpt["model_args"]["block_size"]
        tokens, _ = validation_tokens(ckpt, opts["data_dir"] or None, opts["split"])
        for overrides in methods:
            kind = overrides.get("rope_scaling")
            if kind and positional.scaling_problem(ckpt["model_args"]["pos_encoding"], kind) is not None:
                continue
            model = checkpoint.build_model(ckpt, overrides, device, strict=False)
            label = f"{os.path.basename(os.path.normpath(d))} {method_label(model)}"
            lens = lens | {block}
            with autocast(device, dtype):
                got = context_use.measure(model, tokens, block, opts["context_gain"], opts["per_position"],
                                          opts["tokens_per_point"], device=device)
            if got["gain"] is not None:
                gains[label] = got["gain"]
            if got["curve"] is not None:
                curves[label] = got["curve"]
    paths = []
    if gains:
        paths += context_use.write_context_gain(gains, report_dir).values()
        print("\n" + "\n".join(context_use.gain_table_lines(gains)))
    if curves:
        paths += context_use.write_per_position(curves, report_dir, lens.pop() if len(lens) == 1 else None).values()
    return paths


def main(argv):
    try:
        out_dirs, opts, methods = parse_args(argv)
        report_dir = opts["report_dir"] or out_dirs[0]
        earlier = [p for p in report_paths(report_dir).values() if os.path.exists(p)]
        if earlier and not opts["overwrite"]:
            raise ConfigError(f"{earlier[0]} holds an earlier evaluation; keep it with another --report_dir=..., "
                              f"or replace it with --overwrite=True")
        device = pick_device(opts["device"])
        dtype = pick_dtype(opts["dtype"], device.split(":")[0])
        ckpts = {d: checkpoint.load(d) for d in out_dirs}
        base = {k: v for k, v in methods[0].items() if k != "rope_scaling"}
        for c in ckpts.values():
            model_config(c["model_args"], base, strict=False)  # every override checked before anything is scored
        encodings = {d: c["model_args"]["pos_encoding"] for d, c in ckpts.items()}
        for kind in {m.get("rope_scaling") for m in methods} - {None}:
            if not any(positional.scaling_problem(e, kind) is None for e in encodings.values()):
                takers = ", ".join(n for n in positional.REGISTRY if positional.scaling_problem(n, kind) is None)
                raise ConfigError(f"--rope_scaling={kind} needs a checkpoint of {takers}; none of "
                                  f"{', '.join(out_dirs)} is one: drop it from --rope_scaling")
        per_dir = {d: opts["lengths"] or [m * c["model_args"]["block_size"] for m in MULTIPLES]
                   for d, c in ckpts.items()}
        budget = max([opts["tokens_per_point"]] + [max(v) for v in per_dir.values()])  # the same tokens for all
        if opts["threads"] < 0:
            raise ConfigError(f"--threads must be >= 0 (0: one per core that other work leaves idle), "
                              f"got {opts['threads']}")
        threads = cpu_threads.choose(opts["threads"], device)
        note = documents_note(opts["documents"], opts["split"]) if opts["documents"] else scored_note(budget, opts["split"])
        print(f"evaluating on {device} ({dtype}{'; ' + threads if threads else ''}): {note}", flush=True)
        rows = []
        for d in out_dirs:
            for overrides in methods:
                kind = overrides.get("rope_scaling")
                if kind and positional.scaling_problem(encodings[d], kind) is not None:
                    print(f"note: {d} ({encodings[d]}) does not take rope_scaling={kind}; skipped for it",
                          file=sys.stderr)
                    continue
                new = evaluate_checkpoint(d, per_dir[d], opts["mode"], opts["stride"] or None, overrides, budget,
                                          device, opts["data_dir"] or None, opts["split"], dtype, ckpt=ckpts[d],
                                          documents=opts["documents"], data_path=opts["data"])
                for r in new:
                    docs = f", {r['docs']} documents" if r["docs"] is not None else ""
                    print(f"{d:>20} {r['encoding']:>10} {r['method']:>24} {r['length']:>6}: loss {fmt_num(r['loss'])}, "
                          f"ppl {fmt_num(r['ppl'])}, bits/byte {fmt_num(r['bpb'])}{docs}", flush=True)
                rows += new
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        fail(e)
    train_lens = {c["model_args"]["block_size"] for c in ckpts.values()}
    paths = write_report(rows, report_dir, train_lens.pop() if len(train_lens) == 1 else None,
                         title=f"Perplexity against evaluation length ({opts['mode']})")
    print("\n" + "\n".join(table_lines(rows)))
    print(f"\n({note})\nwrote {paths['md']}, {paths['csv']}, {paths['png']}")
    if opts["wandb_log"]:
        log_wandb(rows, next(iter(ckpts.values()))["config"], report_dir, paths["png"])
    if opts["context_gain"] or opts["per_position"]:
        try:
            print("wrote " + ", ".join(context_reports(ckpts, methods, opts, device, dtype, report_dir)))
        except (ValueError, RuntimeError) as e:
            fail(e)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
