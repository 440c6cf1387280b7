"""Character-level dataset in nanoGPT's format.

Writes train.bin / val.bin (np.uint16 ids, the first 90% and last 10% of the text) and meta.pkl
with {'vocab_size', 'itos', 'stoi'}, exactly as nanoGPT's shakespeare_char/prepare.py does.

    python data/shakespeare_char/prepare.py [--input FILE] [--out_dir DIR]
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # so `import data...` works whatever the cwd
from data.corpus import text_arguments  # noqa: E402
from data.documents import write  # noqa: E402


def prepare(text, out_dir):
    """Tokenise `text` by character into out_dir; return a small summary dict."""
    chars = sorted(set(text))
    if len(chars) > 2**16:
        raise ValueError(f"text has {len(chars)} distinct characters, more than uint16 ids can hold")
    stoi = {ch: i for i, ch in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(0.9 * len(ids))
    write(out_dir, {"train": ids[:n], "val": ids[n:]}, {"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                                                        "stoi": stoi})
    return {"chars": len(text), "vocab_size": len(chars), "train": n, "val": len(ids) - n}


if __name__ == "__main__":
    text, args = text_arguments(__doc__, HERE)
    s = prepare(text, args.out_dir)
    print(f"{s['chars']:,} characters, vocab size {s['vocab_size']}; "
          f"train {s['train']:,} tokens, val {s['val']:,} tokens -> {args.out_dir}")
