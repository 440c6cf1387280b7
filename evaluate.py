"""Perplexity against evaluation length, past the training length (Press et al. 2022,
"Train Short, Test Long", https://arxiv.org/abs/2108.12409, section 2 and appendix B).

    python evaluate.py out-rope out-alibi                        # 1, 2, 4, 8, 16 x block_size
    python evaluate.py out-rope out-alibi --lengths=64,256,1024 --mode=sliding --stride=32
    python evaluate.py out-rope --rope_scaling=base,linear,ntk,yarn --rope_factor=4
    python evaluate.py out-alibi --window=64 --sinks=4 --report_dir=reports

Two modes, as in the ALiBi paper:
  nonoverlap  the text is cut into windows of the evaluation length L; every token is
              scored, the first ones of each window with little context;
  sliding     windows of length L advance by the stride s; only the last s tokens of each
              window are scored (all L of the first), so every token has L - s or more
              tokens of context. With s = L the two modes are the same computation.
Every (checkpoint, method, length) scores the same tokens: the first N targets of the
split, N = max(tokens_per_point, longest length), so numbers compare across lengths and
runs, and a long length costs no more scored tokens than a short one. An encoding with
a position table (`learned`) gets "n/a" rows past it.

Model keys given on the command line (--rope_scaling, --rope_factor, --window, --sinks,
any key of model.GPTConfig) override the checkpoint's at evaluation time. --rope_scaling
takes a comma list; "base" means none. A scaling is skipped, with a note, for the
checkpoints whose encoding does not take it (non-rotary; xpos for rerope), and refused
if no checkpoint given takes it.
Writes extrapolation.{csv,md,png} to --report_dir (default: the first out dir).
"""
import csv
import dataclasses
import math
import os
import sys

import torch
from torch.nn import functional as F

import checkpoint
import positional
from config import SETTINGS, ConfigError, coerce, parse_override
from data.loader import TokenData
from model import GPTConfig
from sample import load_model

MULTIPLES = (1, 2, 4, 8, 16)      # default lengths, in units of the training block_size
TOKENS_PER_POINT = 8192           # scored tokens per (checkpoint, method, length)
BATCH_TOKENS = 4096               # tokens per forward pass: bounds memory at long lengths
COLUMNS = ("out_dir", "encoding", "method", "mode", "length", "tokens", "loss", "ppl")
MODEL_KEYS = {f.name for f in dataclasses.fields(GPTConfig)}


def spans(n, length, stride):
    """Windows of `length` tokens covering the targets [0, n) (n >= length), each scoring
    the targets from its third element on, none twice: [(start, end, first_scored), ...]."""
    out, scored, end = [], 0, length
    while scored < n:
        end = min(end, n)
        out.append((end - length, end, scored))
        scored, end = end, end + stride
    return out


@torch.no_grad()
def score(model, x, y, length, stride, device="cpu", batch_tokens=BATCH_TOKENS):
    """Summed negative log-likelihood of the targets y[0:n] (n = len(y)), predicted from
    windows of x (the same tokens shifted by one). Returns (nll_sum, n_scored)."""
    windows = spans(len(y), length, stride)
    per_batch = max(1, batch_tokens // length)
    total, count = 0.0, 0
    for b in range(0, len(windows), per_batch):
        chunk = windows[b:b + per_batch]
        xb = torch.stack([x[s:e] for s, e, _ in chunk]).to(device)             # (b, L)
        yb = torch.stack([y[s:e] for s, e, _ in chunk]).to(device)             # (b, L)
        logits, _ = model(xb)                                                   # (b, L, V)
        nll = F.cross_entropy(logits.float().transpose(1, 2), yb, reduction="none")   # (b, L)
        offset = torch.tensor([first - s for s, _, first in chunk], device=device)
        keep = torch.arange(length, device=device)[None, :] >= offset[:, None]       # (b, L)
        total += nll[keep].sum().item()
        count += int(keep.sum())
    return total, count


def method_label(model):
    """'base', 'yarn x4', 'window 64 sinks 4', 'rerope w32 + window 64', ... of a model."""
    cfg = model.config
    parts = [model.pe.method_label()] if model.pe.method_label() else []
    if cfg.window:
        parts.append(f"window {cfg.window}" + (f" sinks {cfg.sinks}" if cfg.sinks else ""))
    return " + ".join(parts) or "base"


def check_overrides(overrides):
    for k, v in overrides.items():
        if k not in MODEL_KEYS and k not in SETTINGS:
            raise ConfigError(f"{k!r} is not a model key; evaluation takes the keys of model.GPTConfig")
    if "window" in overrides and overrides["window"] < 1:
        raise ConfigError(f"--window must be >= 1 (the number of most recent keys each query sees), "
                          f"got {overrides['window']}")


def validation_tokens(ckpt, data_dir, split):
    """The split's tokens as the memmap (np.uint16) and the TokenData it comes from."""
    cfg = ckpt["config"]
    data = TokenData(os.path.join(data_dir or cfg.get("data_dir", "data"), cfg.get("dataset", "")))
    if split not in data.splits:
        raise ConfigError(f"unknown split {split!r}; use train or val")
    return data.splits[split], data


def evaluate_checkpoint(out_dir, lengths=None, mode="nonoverlap", stride=None, overrides=None,
                        tokens_per_point=TOKENS_PER_POINT, device="cpu", data_dir=None, split="val"):
    """Rows (dicts with COLUMNS) of loss and perplexity for each evaluation length.
    lengths: default MULTIPLES x the checkpoint's block_size. overrides: model keys, e.g.
    {"rope_scaling": "yarn", "rope_factor": 4.0} or {"window": 64, "sinks": 4}.
    stride (sliding mode): default length // 2; must be in [1, length]."""
    overrides = dict(overrides or {})
    check_overrides(overrides)
    if mode not in ("nonoverlap", "sliding"):
        raise ConfigError(f"unknown mode {mode!r}; use nonoverlap or sliding")
    if tokens_per_point < 1:
        raise ConfigError(f"tokens_per_point must be >= 1, got {tokens_per_point}")
    model, ckpt = load_model(out_dir, overrides, device, strict=False)
    block = ckpt["model_args"]["block_size"]
    lengths = sorted(set(lengths or [m * block for m in MULTIPLES]))
    if lengths[0] < 1:
        raise ConfigError(f"evaluation lengths must be >= 1, got {lengths[0]}")
    tokens, data = validation_tokens(ckpt, data_dir, split)
    available = len(tokens) - 1                         # targets that have an input before them
    if lengths[-1] > available:
        raise ConfigError(f"{split}.bin in {data.dir} has {len(tokens)} tokens; evaluation length {lengths[-1]} "
                          f"needs at least {lengths[-1] + 1}: use shorter --lengths or more data")
    n = min(max(tokens_per_point, lengths[-1]), available)
    scored = torch.from_numpy(tokens[:n + 1].astype("int64"))   # only what is scored leaves the memmap
    x, y = scored[:n], scored[1:]
    base = dict(out_dir=out_dir, encoding=model.config.pos_encoding, method=method_label(model), mode=mode)
    rows = []
    for length in lengths:
        s = length if mode == "nonoverlap" else (stride or max(1, length // 2))
        if not 1 <= s <= length:
            raise ConfigError(f"--stride must be in [1, length]; got {s} for length {length}")
        limit = model.pe.max_positions
        if limit is not None and length > limit:    # the table ends: report, do not fail the run
            rows.append(dict(base, length=length, tokens=0, loss=float("nan"), ppl=float("nan")))
            continue
        nll, count = score(model, x, y, length, s, device)
        loss = nll / count
        rows.append(dict(base, length=length, tokens=count, loss=loss, ppl=math.exp(min(loss, 700))))
    return rows


# ---- reports -------------------------------------------------------------------------
def _series(rows):
    """{(out_dir, encoding, method, mode): {length: row}} in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault((r["out_dir"], r["encoding"], r["method"], r["mode"]), {})[r["length"]] = r
    return out


def _fmt(v):
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def table_lines(rows):
    """A markdown table of perplexity: one line per (checkpoint, method, mode), one column per length."""
    lengths = sorted({r["length"] for r in rows})
    head = ["run", "encoding", "method", "mode"] + [str(n) for n in lengths]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (out_dir, enc, method, mode), by_len in _series(rows).items():
        cells = [_fmt(by_len[n]["ppl"]) if n in by_len else "" for n in lengths]
        lines.append("| " + " | ".join([os.path.basename(os.path.normpath(out_dir)), enc, method, mode] + cells) + " |")
    return lines


def write_report(rows, report_dir, train_len=None, title="Perplexity against evaluation length"):
    """Write extrapolation.csv (one row per point), .md (perplexity table) and .png (plot)
    into report_dir. Returns {"md": path, "csv": path, "png": path}."""
    os.makedirs(report_dir, exist_ok=True)
    paths = {k: os.path.join(report_dir, f"extrapolation.{k}") for k in ("md", "csv", "png")}
    with open(paths["csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "loss": _fmt(r["loss"]) if math.isnan(r["loss"]) else f"{r['loss']:.6f}",
                        "ppl": _fmt(r["ppl"]) if math.isnan(r["ppl"]) else f"{r['ppl']:.6f}"})
    tokens = sorted({r["tokens"] for r in rows if r["tokens"]})
    note = [f"Validation perplexity; {tokens[-1] if tokens else 0} scored tokens per point, the same tokens "
            f"at every length" + (f"; trained at length {train_len}." if train_len else ".")]
    with open(paths["md"], "w") as f:
        f.write("\n".join([f"## {title}", "", *note, "", *table_lines(rows), ""]))
    plot(rows, paths["png"], train_len, title)
    return paths


def plot(rows, path, train_len=None, title=""):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = _series(rows)
    dirs_of = {}
    for out_dir, enc, _, _ in series:
        dirs_of.setdefault(enc, set()).add(out_dir)
    modes = {k[3] for k in series}
    fig, ax = plt.subplots(figsize=(10, 5))
    for (out_dir, enc, method, mode), by_len in series.items():
        pts = sorted((n, r["ppl"]) for n, r in by_len.items() if not math.isnan(r["ppl"]))
        if not pts:
            continue
        name = enc if len(dirs_of[enc]) == 1 else os.path.basename(os.path.normpath(out_dir))
        name += "" if method == "base" else f", {method}"
        name += "" if len(modes) == 1 else f" ({mode})"
        ax.plot(*zip(*pts), marker="o", label=name)
    if train_len:
        ax.axvline(train_len, color="grey", linestyle=":", label=f"training length {train_len}")
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    lengths = sorted({r["length"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("validation perplexity")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # outside: lines stay visible
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def log_wandb(rows, ckpt_config, report_dir, png):
    """One new wandb run (job_type eval) holding the rows as a table and the plot."""
    from config import Config
    from wandb_util import start_wandb
    known = {f.name for f in dataclasses.fields(Config)}
    cfg = Config(**{k: v for k, v in ckpt_config.items() if k in known})
    cfg.out_dir = report_dir
    run = start_wandb(cfg, job_type="eval", name="extrapolation")
    if run is None:
        return
    import wandb
    table = wandb.Table(columns=list(COLUMNS), data=[[r[c] for c in COLUMNS] for r in rows])
    series = _series(rows)
    lengths = sorted({r["length"] for r in rows})
    ys = [[by_len[n]["ppl"] if n in by_len else float("nan") for n in lengths] for by_len in series.values()]
    keys = [f"{enc} {method} ({mode})" for _, enc, method, mode in series]
    run.log({"extrapolation/table": table, "extrapolation/plot": wandb.Image(png),
             "extrapolation/ppl": wandb.plot.line_series(xs=lengths, ys=ys, keys=keys, xname="length",
                                                         title="perplexity against evaluation length")})
    run.finish()


# ---- command line -------------------------------------------------------------------
OPTIONS = dict(lengths="", mode="nonoverlap", stride=0, tokens_per_point=TOKENS_PER_POINT, device="cpu",
               data_dir="", split="val", report_dir="", wandb_log=False)


def parse_args(argv):
    """-> (out_dirs, options, methods); methods: one overrides dict per --rope_scaling entry."""
    out_dirs, opts, overrides, scalings = [], dict(OPTIONS), {}, [""]
    for arg in argv:
        if not arg.startswith("--"):
            out_dirs.append(arg)
            continue
        key, value = parse_override(arg)
        raw = arg.split("=", 1)[1]
        if key in OPTIONS:
            want = type(OPTIONS[key])
            if want is str:
                value = raw
            elif want is bool:
                value = raw.lower() in ("1", "true", "yes")
            elif not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"--{key} wants an integer, got {raw!r}")
            opts[key] = value
        elif key == "rope_scaling":
            scalings = ["" if s.strip() in ("base", "none", "") else s.strip() for s in raw.split(",")]
            for s in scalings:
                if s and s not in positional.SCALINGS:
                    raise ConfigError(f"unknown rope_scaling {s!r}; valid: base, {', '.join(positional.SCALINGS)}")
        elif key in MODEL_KEYS or key in SETTINGS:
            overrides[key] = coerce(key, value)
        else:
            raise ConfigError(f"unknown option --{key}; options: {', '.join(OPTIONS)}, or a model key of "
                              f"model.GPTConfig (rope_scaling, rope_factor, window, sinks, ...)")
    if not out_dirs:
        raise ConfigError("give one or more checkpoint folders: python evaluate.py out-rope out-alibi")
    if opts["lengths"]:
        try:
            opts["lengths"] = [int(v) for v in opts["lengths"].split(",")]
        except ValueError:
            raise ConfigError(f"--lengths wants integers separated by commas, got {opts['lengths']!r}")
    else:
        opts["lengths"] = None
    check_overrides(overrides)
    if overrides.get("sinks") and not overrides.get("window"):
        raise ConfigError(f"--sinks={overrides['sinks']} needs a window: add --window=W")
    methods = [dict(overrides, **({"rope_scaling": s} if s else {})) for s in scalings]
    return out_dirs, opts, methods


def main(argv):
    try:
        out_dirs, opts, methods = parse_args(argv)
        ckpts = {d: checkpoint.load(d) for d in out_dirs}
        encodings = {d: c["model_args"]["pos_encoding"] for d, c in ckpts.items()}
        for kind in {m.get("rope_scaling") for m in methods} - {None}:
            if not any(positional.scaling_problem(e, kind) is None for e in encodings.values()):
                takers = ", ".join(n for n in positional.REGISTRY if positional.scaling_problem(n, kind) is None)
                raise ConfigError(f"--rope_scaling={kind} needs a checkpoint of {takers}; none of "
                                  f"{', '.join(out_dirs)} is one: drop it from --rope_scaling")
        per_dir = {d: opts["lengths"] or [m * c["model_args"]["block_size"] for m in MULTIPLES] for d, c in ckpts.items()}
        budget = max([opts["tokens_per_point"]] + [max(v) for v in per_dir.values()])  # the same tokens for all
        rows = []
        for d in out_dirs:
            for overrides in methods:
                kind = overrides.get("rope_scaling")
                if kind and positional.scaling_problem(encodings[d], kind) is not None:
                    print(f"note: {d} ({encodings[d]}) does not take rope_scaling={kind}; skipped for it",
                          file=sys.stderr)
                    continue
                new = evaluate_checkpoint(d, per_dir[d], opts["mode"], opts["stride"] or None, overrides, budget,
                                          opts["device"], opts["data_dir"] or None, opts["split"])
                for r in new:
                    print(f"{d:>20} {r['encoding']:>10} {r['method']:>24} {r['length']:>6}: loss {_fmt(r['loss'])}, "
                          f"ppl {_fmt(r['ppl'])}", flush=True)
                rows += new
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    train_lens = {c["model_args"]["block_size"] for c in ckpts.values()}
    report_dir = opts["report_dir"] or out_dirs[0]
    paths = write_report(rows, report_dir, train_lens.pop() if len(train_lens) == 1 else None,
                         title=f"Perplexity against evaluation length ({opts['mode']})")
    print("\n" + "\n".join(table_lines(rows)))
    print(f"\nwrote {paths['md']}, {paths['csv']}, {paths['png']}")
    if opts["wandb_log"]:
        log_wandb(rows, next(iter(ckpts.values()))["config"], report_dir, paths["png"])
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
