"""Turn a dataset's meta.pkl (or the copy a checkpoint carries) back into encode/decode functions.

The cases, decided by what meta.pkl holds:
  - 'stoi'/'itos'            character level (data/shakespeare_char; data/prepare.py adds an 'eot' id);
  - 'tokenizer': 'byte'      the 256 bytes, then the end-of-text token (data/prepare.py);
  - 'tokenizer': 'bpe'       a byte-level BPE trained by data/prepare.py: 'tokenizer_json' holds its
                             tokenizer.json, so a checkpoint carries the whole tokenizer;
  - 'tokenizer': 'tiktoken'  BPE, with an optional 'id_map' (dense id -> original id, data/shakespeare);
  - no meta.pkl at all       GPT-2 BPE, nanoGPT's convention for datasets such as openwebtext.
train.py saves tokenizer_entry(meta) in each checkpoint, so sampling needs no dataset folder.
"""
import math

import numpy as np
import tiktoken


def _names(items):
    return ", ".join(repr(s) for s in dict.fromkeys(items))  # unique, in order of first appearance


GPT2 = {"tokenizer": "tiktoken", "encoding": "gpt2"}
EOT = "<|endoftext|>"                                              # the end-of-text token's text
# meta.pkl's keys about the data, not the tokenizer
DATA_KEYS = ("dtype", "docs", "bytes_per_token", "sources", "split")


def tokenizer_entry(meta):
    """What a checkpoint stores as its tokenizer: the dataset's meta.pkl contents less what
    describes the data (the char vocabulary, the byte tokenizer, the BPE's tokenizer.json, or
    the tiktoken encoding's name and id map), GPT-2 BPE when there is none ({})."""
    return {k: v for k, v in meta.items() if k not in DATA_KEYS} if meta else dict(GPT2)


def describe_tokenizer(entry):
    """'bpe, 512 ids', 'char, 65 ids', ... of a tokenizer entry, for messages."""
    kind = entry.get("tokenizer") or ("char" if "stoi" in entry else "?")
    name = f"tiktoken:{entry['encoding']}" if kind == "tiktoken" else kind
    return f"{name}, {entry.get('vocab_size', '?')} ids"


def bits_per_byte(loss, bytes_per_token):
    """Bits per byte (nanochat's measure, so that tokenizers compare) of a mean loss of L nats per token
    over text of b bytes per token: L / ln 2 / b; None where b is unknown."""
    if not bytes_per_token:
        return None
    return loss / math.log(2) / bytes_per_token


def token_byte_lengths(meta):
    """np.int64 array (vocab_size,): the UTF-8 bytes each id stands for (0 for special tokens), or
    None when the tokenizer cannot be loaded (GPT-2's files offline)."""
    try:
        _, decode, vocab_size = tokenizer_from(meta)
    except RuntimeError:
        return None
    out = np.zeros(max(vocab_size, meta.get("vocab_size", 0)), dtype=np.int64)
    if meta.get("tokenizer") == "bpe":   # byte-level: one character of a token's string per byte
        from tokenizers import Tokenizer
        tok = Tokenizer.from_str(meta["tokenizer_json"])
        specials = set(tok.get_added_tokens_decoder())
        for t, i in tok.get_vocab().items():
            out[i] = 0 if i in specials else len(t)
        return out
    if "stoi" in meta:
        for c, i in meta["stoi"].items():
            out[i] = len(c.encode("utf-8"))
        return out
    if meta.get("tokenizer") == "byte":
        out[:256] = 1
        return out
    enc = tiktoken.get_encoding(meta["encoding"])
    ids = meta.get("id_map") or range(enc.n_vocab)
    specials = {enc.encode_single_token(s) for s in enc.special_tokens_set} | {meta.get("eot")}
    for i, t in enumerate(ids):
        try:
            out[i] = 0 if t in specials else len(enc.decode_single_token_bytes(t))
        except KeyError:  # a hole in the encoding's ids
            out[i] = 0
    return out


def tokenizer_from(meta, source="the checkpoint"):
    """(encode, decode, vocab_size) from a meta dict; encode: str -> list[int], decode: list[int] -> str."""
    if meta.get("tokenizer") == "byte":
        return byte_tokenizer(meta["eot"], meta["vocab_size"])
    if meta.get("tokenizer") == "bpe":
        from tokenizers import Tokenizer
        tok = Tokenizer.from_str(meta["tokenizer_json"])

        def encode(s):
            return tok.encode(s).ids

        def decode(ids):
            return tok.decode(ids, skip_special_tokens=False)

        return encode, decode, meta["vocab_size"]
    if "stoi" in meta:
        stoi, itos = meta["stoi"], meta["itos"]

        def encode(s):
            unknown = [c for c in s if c not in stoi]
            if unknown:
                raise ValueError(f"prompt has characters not in the vocabulary: {_names(unknown)}")
            return [stoi[c] for c in s]

        def decode(ids):
            return "".join(itos[i] for i in ids)

        return encode, decode, meta["vocab_size"]

    try:
        enc = tiktoken.get_encoding(meta["encoding"])
    except Exception as e:  # gpt2 is downloaded on first use, so offline this is a ConnectionError
        raise RuntimeError(f"could not load tiktoken encoding {meta['encoding']!r} ({source}): "
                           f"{type(e).__name__}: {e}") from e
    id_map = meta.get("id_map")
    if id_map is None:
        return enc.encode_ordinary, enc.decode, enc.n_vocab

    dense = {orig: i for i, orig in enumerate(id_map)}

    def encode(s):
        ids = enc.encode_ordinary(s)
        unknown = [enc.decode([t]) for t in ids if t not in dense]
        if unknown:
            raise ValueError(f"prompt has tokens not in this dataset's vocabulary: {_names(unknown)}")
        return [dense[t] for t in ids]

    def decode(ids):
        return enc.decode([id_map[i] for i in ids])

    return encode, decode, len(id_map)


def byte_tokenizer(eot, vocab_size):
    """Ids 0-255 are the bytes, `eot` the end of a document; decode shows it as EOT and replaces
    a broken UTF-8 sequence (a sample cut mid-character) with U+FFFD."""
    def encode(s):
        return list(s if isinstance(s, bytes) else s.encode("utf-8"))

    def decode(ids):
        parts, run = [], []
        for i in list(ids) + [eot]:
            if i == eot:
                parts.append(bytes(run).decode("utf-8", errors="replace"))
                run = []
            else:
                run.append(i)
        return EOT.join(parts)

    return encode, decode, vocab_size
