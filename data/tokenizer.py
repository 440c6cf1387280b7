"""Turn a dataset's meta.pkl (or the copy a checkpoint carries) back into encode/decode functions.

Three cases, decided by what meta.pkl holds:
  - 'stoi'/'itos'            character level (data/shakespeare_char);
  - 'tokenizer': 'tiktoken'  BPE, with an optional 'id_map' (dense id -> original id, data/shakespeare);
  - no meta.pkl at all       GPT-2 BPE, nanoGPT's convention for datasets such as openwebtext.
train.py saves tokenizer_entry(meta) in each checkpoint, so sampling needs no dataset folder.
"""
import os
import pickle

import tiktoken


def _names(items):
    return ", ".join(repr(s) for s in dict.fromkeys(items))  # unique, in order of first appearance


GPT2 = {"tokenizer": "tiktoken", "encoding": "gpt2"}


def tokenizer_entry(meta):
    """What a checkpoint stores as its tokenizer: the dataset's meta.pkl contents (the char
    vocabulary, or the BPE encoding's name and id map), GPT-2 BPE when there is none ({})."""
    return dict(meta) if meta else dict(GPT2)


def load_tokenizer(meta_path=None):
    """Return (encode, decode, vocab_size) of a meta.pkl (None or missing: GPT-2 BPE)."""
    if meta_path is None or not os.path.exists(meta_path):
        return tokenizer_from(GPT2, "no meta.pkl found, so GPT-2 as in nanoGPT")
    with open(meta_path, "rb") as f:
        return tokenizer_from(pickle.load(f), meta_path)


def tokenizer_from(meta, source="the checkpoint"):
    """(encode, decode, vocab_size) from a meta dict; encode: str -> list[int], decode: list[int] -> str."""
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
