"""Turn a dataset's meta.pkl back into encode/decode functions.

Three cases, decided by what meta.pkl holds:
  - 'stoi'/'itos'            character level (data/shakespeare_char);
  - 'tokenizer': 'tiktoken'  BPE, with an optional 'id_map' (dense id -> original id, data/shakespeare);
  - no meta.pkl at all       GPT-2 BPE, nanoGPT's convention for datasets such as openwebtext.
"""
import os
import pickle

import tiktoken


def _names(items):
    return ", ".join(repr(s) for s in dict.fromkeys(items))  # unique, in order of first appearance


def load_tokenizer(meta_path=None):
    """Return (encode, decode, vocab_size); encode: str -> list[int], decode: list[int] -> str."""
    if meta_path is None or not os.path.exists(meta_path):
        meta = {"tokenizer": "tiktoken", "encoding": "gpt2"}
    else:
        with open(meta_path, "rb") as f:
            meta = pickle.load(f)

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
        source = meta_path if "vocab_size" in meta else "no meta.pkl found, so GPT-2 as in nanoGPT"
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
