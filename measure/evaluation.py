"""Perplexity against evaluation length, past the training length (Press et al. 2022,
"Train Short, Test Long", https://arxiv.org/abs/2108.12409, section 2 and appendix B):
the library behind evaluate.py and compare.py (docs/extrapolation.md).

Modes: nonoverlap (windows of the length L, every token scored); sliding (windows advance by
the stride s, only their last s tokens scored); documents=N (the YaRN authors' eval: the first
L targets of each document of at least L + 1 tokens). Every (checkpoint, method, length) scores
the same targets: chunks of the longest length C spread evenly over the whole val split
(chunk_starts), as many as give at least tokens_per_point targets; at a length L each chunk is
scored by windows of L inside it, so the targets never depend on L. Each row also gives bits per
byte (data/tokenizer.py), so tokenizers compare, and the mean loss of each chunk (each document
in mode documents), the unit that measure/stats.py's bootstrap resamples.
"""
import csv
import math
import os

import numpy as np
import torch
from torch.nn import functional as F

from training import checkpoint
from training.cli import autocast
from training.config import FIELDS, Config, ConfigError
from data.loader import TokenData
from data.tokenizer import bits_per_byte, describe_tokenizer, token_byte_lengths, tokenizer_entry
from measure.progress import Progress

MULTIPLES = (1, 2, 4, 8, 16)      # default lengths, in units of the training block_size
TOKENS_PER_POINT = 8192           # scored tokens per (checkpoint, method, length), at least
BATCH_TOKENS = 4096               # tokens per forward pass: bounds memory at long lengths
COLUMNS = ("out_dir", "encoding", "method", "mode", "length", "tokens", "loss", "ppl", "bpb", "docs")
TARGETS = "chunks of the longest length spread evenly over the split"   # in cache keys: what is scored


def chunk_starts(n_tokens, size, tokens, docs=None):
    """First offsets of the chunks scored in a split of n_tokens: a chunk at a scores the `size` targets
    tokens[a + 1 .. a + size]. The split is cut into non-overlapping chunks, each starting at a
    document's first token (docs: the documents' offsets) or, without documents, every `size` tokens;
    of these, ceil(tokens / size) are kept at evenly spaced ranks, centred (all where there are fewer)."""
    if docs is None:
        cands = np.arange(0, n_tokens - size, size)
    else:
        cands, free = [], 0
        for d in np.asarray(docs).tolist():
            if free <= d < n_tokens - size:
                cands.append(d)
                free = d + size
        cands = np.asarray(cands, dtype=np.int64)
    k = min(-(-tokens // size), len(cands))
    return cands[(2 * np.arange(k) + 1) * len(cands) // (2 * k)]


def spans(n, length, stride):
    """Windows of `length` tokens covering the targets [0, n) (n >= length), each advancing by
    `stride` and scoring its targets from an offset on, none twice: [(start, offset), ...]."""
    out, scored, end = [], 0, length
    while scored < n:
        end = min(end, n)
        out.append((end - length, scored - end + length))
        scored, end = end, end + stride
    return out


@torch.no_grad()
def window_losses(model, tokens, starts, length, device="cpu", batch_tokens=BATCH_TOKENS):
    """(len(starts), length) float64 losses: tokens[s:s+length] predicting tokens[s+1:s+length+1], each s."""
    per_batch = max(1, batch_tokens // length)
    out, progress = [], Progress("evaluate", len(starts), "windows", f"length {length}")
    for b in range(0, len(starts), per_batch):
        seq = torch.from_numpy(np.stack([np.asarray(tokens[s:s + length + 1], dtype=np.int64)
                                         for s in starts[b:b + per_batch]])).to(device)          # (b, L + 1)
        with progress.across(getattr(model, "h", ()), len(seq)):                                  # layer by layer
            logits, _ = model(seq[:, :-1])                                                        # (b, L, V)
        out.append(F.cross_entropy(logits.float().transpose(1, 2), seq[:, 1:], reduction="none").double().cpu())
    return torch.cat(out)


def score(model, tokens, windows, length, device="cpu", batch_tokens=BATCH_TOKENS):
    """((n,) float64 summed loss of each window, ids of the targets scored) of windows [(start, offset)]:
    each window tokens[start:start+length] predicts the next tokens, scored from `offset` on."""
    nll = window_losses(model, tokens, [s for s, _ in windows], length, device, batch_tokens)      # (n, L)
    keep = torch.arange(length)[None, :] >= torch.tensor([o for _, o in windows])[:, None]
    return (nll * keep).sum(1), np.concatenate([tokens[s + 1 + o:s + 1 + length] for s, o in windows])


def method_label(model):
    """'base', 'yarn x4', 'window 64 sinks 4', 'windows 32,0', 'rerope w32 + window 64', ... of a model."""
    cfg = model.config
    window = f"windows {cfg.layer_windows}" if cfg.layer_windows else f"window {cfg.window}" if cfg.window else ""
    window += f" sinks {cfg.sinks}" if window and cfg.sinks else ""
    return " + ".join(p for p in (model.pe.method_label(), window) if p) or "base"


def check_overrides(overrides):
    """Evaluation-time model keys: a window must be >= 1 (the rest is config.model_config's)."""
    if "window" in overrides and overrides["window"] < 1:
        raise ConfigError(f"--window must be >= 1 (the number of most recent keys each query sees), "
                          f"got {overrides['window']}")


def validation_tokens(ckpt, data_dir, split="val"):
    """(the split's tokens, its TokenData) of the checkpoint's dataset (checkpoint.dataset_dir)."""
    data = TokenData(checkpoint.dataset_dir(ckpt, data_dir))
    return data.splits[split], data


def eval_text(ckpt, data_dir=None, path=""):
    """(tokens, starts, byte_lengths, where): the ids to score, each document's first offset and
    each id's bytes (None where unknown) and a name for messages. From `path` when given (files or
    folders, comma-separated, tokenized with the checkpoint's tokenizer; or one dataset folder
    prepared with it), else the checkpoint's validation split."""
    entry = ckpt.get("tokenizer")
    if path and not os.path.isfile(os.path.join(path, "val.bin")):
        from data.documents import encode_documents, find_files, read_documents
        if entry is None:
            raise ConfigError("this checkpoint carries no tokenizer, so --data cannot be tokenized; retrain it with "
                              "the current train.py")
        docs, _ = read_documents(find_files(path.split(",")), as_bytes=entry.get("tokenizer") == "byte")
        ids = encode_documents(entry, docs)
        starts = np.concatenate([[0], np.cumsum([len(a) for a in ids])[:-1]]).astype(np.int64)
        return np.concatenate(ids), starts, token_byte_lengths(entry), f"--data {path}"
    data = TokenData(path or checkpoint.dataset_dir(ckpt, data_dir))
    if path and entry is not None and tokenizer_entry(data.meta) != entry:
        theirs = describe_tokenizer(tokenizer_entry(data.meta))
        raise ConfigError(f"{path} was prepared with another tokenizer ({theirs})"
                          f" than the checkpoint's ({describe_tokenizer(entry)}); give --data the raw files to "
                          f"tokenize them with the checkpoint's")
    starts = data.docs["val"] if data.docs is not None else None
    return data.splits["val"], starts, token_byte_lengths(entry or tokenizer_entry(data.meta)), f"val.bin in {data.dir}"


def evaluate_checkpoint(out_dir, lengths=None, mode="nonoverlap", stride=None, overrides=None,
                        tokens_per_point=TOKENS_PER_POINT, device="cpu", data_dir=None, dtype="float32", ckpt=None,
                        documents=0, data_path=""):
    """Rows (dicts with COLUMNS) of loss, perplexity and bits per byte for each evaluation length
    (default MULTIPLES x block_size). overrides: evaluation-time model keys, e.g. {"rope_scaling":
    "yarn", "rope_factor": 4.0} or {"window": 64}. stride (sliding): default length // 2. dtype: a
    name of cli.DTYPES. ckpt: out_dir's checkpoint if loaded. documents: N > 0 scores the first
    `length` tokens of at most N documents (mode "documents"). data_path: eval_text's path."""
    overrides = dict(overrides or {})
    check_overrides(overrides)
    if mode not in ("nonoverlap", "sliding"):
        raise ConfigError(f"unknown mode {mode!r}; use nonoverlap or sliding")
    if documents < 0:
        raise ConfigError(f"documents must be >= 0 (0: off; N: at most N documents per length), got {documents}")
    if tokens_per_point < 1:
        raise ConfigError(f"tokens_per_point must be >= 1, got {tokens_per_point}")
    ckpt = ckpt if ckpt is not None else checkpoint.load(out_dir)
    model = checkpoint.build_model(ckpt, overrides, device, strict=False)  # a sweep: base ignores rope_factor
    lengths = sorted(set(lengths or [m * ckpt["model_args"]["block_size"] for m in MULTIPLES]))
    if lengths[0] < 1:
        raise ConfigError(f"evaluation lengths must be >= 1, got {lengths[0]}")
    tokens, starts, byte_lengths, where = eval_text(ckpt, data_dir, data_path)
    if documents and starts is None:
        raise ConfigError(f"{where} has no document boundaries; per-document evaluation needs data prepared by "
                          f"data/prepare.py, or files given with --data")
    if not documents and lengths[-1] > len(tokens) - 1:
        raise ConfigError(f"{where} has {len(tokens)} tokens; evaluation length {lengths[-1]} "
                          f"needs at least {lengths[-1] + 1}: use shorter --lengths or more data")
    chunks = None if documents else chunk_starts(len(tokens), lengths[-1], tokens_per_point, starts)  # every length's
    base = dict(out_dir=out_dir, encoding=model.config.pos_encoding, method=method_label(model),
                mode="documents" if documents else mode)
    rows, nan, k = [], float("nan"), None
    for length in lengths:
        s = length if mode == "nonoverlap" or documents else (stride or max(1, length // 2))
        if not 1 <= s <= length:
            raise ConfigError(f"--stride must be in [1, length]; got {s} for length {length}")
        if documents:   # the first `documents` documents of at least length + 1 tokens
            ends = np.append(starts[1:], len(tokens))
            windows = [(first, 0) for first in starts[ends - starts > length][:documents]]
            k = len(windows)
        else:   # each chunk's windows of `length`, in chunk order
            windows = [(a + b, o) for a in chunks.tolist() for b, o in spans(lengths[-1], length, s)]
        if (model.max_positions is not None and length > model.max_positions) or k == 0:  # no positions, or no document
            rows.append(dict(base, length=length, tokens=0, loss=nan, ppl=nan, bpb=nan, docs=k, chunk_loss=[]))
            continue
        with autocast(device, dtype):
            nll, ids = score(model, tokens, windows, length, device)
        units = len(windows) if documents else len(chunks)   # a document, or a chunk (its windows summed)
        loss = nll.sum().item() / len(ids)
        bpt = float(byte_lengths[ids].sum()) / len(ids) if byte_lengths is not None else None
        rows.append(dict(base, length=length, tokens=len(ids), loss=loss, ppl=math.exp(min(loss, 700)),
                         bpb=bits_per_byte(loss, bpt) or nan, docs=k,
                         chunk_loss=(nll.view(units, -1).sum(1) * units / len(ids)).tolist()))
    return rows


# ---- reports -------------------------------------------------------------------------
def series(rows):
    """{(out_dir, encoding, method, mode): {length: row}} in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault((r["out_dir"], r["encoding"], r["method"], r["mode"]), {})[r["length"]] = r
    return out


def fmt_num(v, spec=".3f"):
    return "n/a" if math.isnan(v) else f"{v:{spec}}"


def table_lines(rows, key="ppl"):
    """A markdown table of `key` (ppl or bpb): one line per (checkpoint, method, mode), one column per
    length; per document, the count of documents in parentheses."""
    lengths = sorted({r["length"] for r in rows})
    head = ["run", "encoding", "method", "mode"] + [str(n) for n in lengths]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (out_dir, enc, method, mode), by_len in series(rows).items():
        cells = [fmt_num(by_len[n][key]) + (f" ({by_len[n]['docs']})" if by_len[n]["docs"] is not None else "")
                 if n in by_len else "" for n in lengths]
        lines.append("| " + " | ".join([os.path.basename(os.path.normpath(out_dir)), enc, method, mode] + cells) + " |")
    return lines


def scored_targets(ckpt, lengths=None, tokens_per_point=TOKENS_PER_POINT, data_dir=None, data_path=""):
    """The targets evaluate_checkpoint scores at every length (either mode; not per document): its chunks of
    the longest length, fewer than tokens_per_point asks where the split is short (0 where it is too short)."""
    longest = max(lengths or [m * ckpt["model_args"]["block_size"] for m in MULTIPLES])
    tokens, starts, _, _ = eval_text(ckpt, data_dir, data_path)
    return len(chunk_starts(len(tokens), longest, tokens_per_point, starts)) * longest if longest < len(tokens) else 0


def scored_note(n_tokens):
    """The header's and the report's line on what is scored; n_tokens: the count, or (fewest, most) over checkpoints."""
    low, high = n_tokens if isinstance(n_tokens, tuple) else (n_tokens, n_tokens)
    count = f"{low:,}" if low == high else f"{low:,} to {high:,} (by checkpoint)"
    return (f"val perplexity of {count} val targets, in chunks of the longest length spread evenly "
            f"over the split, the same at every length (training's val loss averages random batches, so it "
            f"differs a little)")


def documents_note(limit):
    return (f"per document: the first L tokens of each val document at least L + 1 tokens long"
            f"{f' (at most {limit})' if limit else ''}, averaged over documents; (n) is the number of documents")


def report_paths(report_dir):
    return {k: os.path.join(report_dir, f"extrapolation.{k}") for k in ("md", "csv", "png")}


def write_report(rows, report_dir, train_len=None, title="Perplexity against evaluation length"):
    """extrapolation.csv (one row per point), .md (tables of ppl and bits per byte) and .png into
    report_dir. Returns report_paths."""
    os.makedirs(report_dir, exist_ok=True)
    paths = report_paths(report_dir)
    with open(paths["csv"], "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows({**r, **{k: fmt_num(r[k], ".6f") for k in ("loss", "ppl", "bpb")}} for r in rows)
    tokens = sorted({r["tokens"] for r in rows if r["tokens"] and r["docs"] is None})
    trained = f"; trained at length {train_len}." if train_len else "."
    note = [scored_note((tokens[0], tokens[-1]) if tokens else 0) + trained]
    if any(r["docs"] is not None for r in rows):
        note.append(documents_note(0) + ".")
    with open(paths["md"], "w") as f:
        f.write("\n".join([f"## {title}", "", *note, "", *table_lines(rows), "", "### Bits per byte", "",
                           *table_lines(rows, "bpb"), ""]))
    plot(rows, paths["png"], train_len, title)
    return paths


def label(key):
    out_dir, enc, method, mode = key
    return f"{os.path.basename(os.path.normpath(out_dir))} ({enc}){'' if method == 'base' else ', ' + method}, {mode}"


def plot(rows, path, train_len=None, title=""):
    """Perplexity against length (log-log), a line per (checkpoint, method, mode)."""
    from matplotlib.ticker import NullFormatter, ScalarFormatter
    from measure.encoding_plots import figure   # here: scoring needs no matplotlib
    lengths = sorted({r["length"] for r in rows})
    with figure(path, train_len=train_len, title=title, xlabel="evaluation length (tokens)",
                ylabel="validation perplexity") as ax:
        for key, by_len in series(rows).items():
            pts = sorted((n, r["ppl"]) for n, r in by_len.items() if not math.isnan(r["ppl"]))
            if pts:
                ax.plot(*zip(*pts), marker="o", label=label(key))
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(n) for n in lengths])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())


def log_wandb(rows, ckpt_config, report_dir, png):
    """One new wandb run (job_type eval) holding the rows as a table and the plot."""
    from training.wandb_util import start_wandb
    cfg = Config(**{k: v for k, v in ckpt_config.items() if k in FIELDS})
    cfg.out_dir = report_dir
    run = start_wandb(cfg, job_type="eval", name="extrapolation")
    if run is None:
        return
    import wandb
    lengths = sorted({r["length"] for r in rows})
    groups = series(rows)
    ys = [[by_len[n]["ppl"] if n in by_len else math.nan for n in lengths] for by_len in groups.values()]
    line = wandb.plot.line_series(xs=lengths, ys=ys, keys=[label(k) for k in groups], xname="length",
                                  title="perplexity against evaluation length")
    run.log({"extrapolation/table": wandb.Table(columns=list(COLUMNS), data=[[r[c] for c in COLUMNS] for r in rows]),
             "extrapolation/plot": wandb.Image(png), "extrapolation/ppl": line})
    run.finish()
