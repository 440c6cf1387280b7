"""Character-level dataset in nanoGPT's format.

Writes train.bin / val.bin (np.uint16 ids, the first 90% and last 10% of the text) and meta.pkl
with {'vocab_size', 'itos', 'stoi'}, exactly as nanoGPT's shakespeare_char/prepare.py does.

    python data/shakespeare_char/prepare.py [--input FILE] [--out_dir DIR]
"""
import argparse
import os
import pickle
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # so `import data...` works whatever the cwd
from data.corpus import read_input  # noqa: E402


def prepare(text, out_dir):
    """Tokenise `text` by character into out_dir; return a small summary dict."""
    chars = sorted(set(text))
    if len(chars) > 2**16:
        raise ValueError(f"text has {len(chars)} distinct characters, more than uint16 ids can hold")
    stoi = {ch: i for i, ch in enumerate(chars)}
    itos = {i: ch for i, ch in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(0.9 * len(ids))
    os.makedirs(out_dir, exist_ok=True)
    ids[:n].tofile(os.path.join(out_dir, "train.bin"))
    ids[n:].tofile(os.path.join(out_dir, "val.bin"))
    with open(os.path.join(out_dir, "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": itos, "stoi": stoi}, f)
    return {"chars": len(text), "vocab_size": len(chars), "train": n, "val": len(ids) - n}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", help="any UTF-8 text file (default: Shakespeare's complete works)")
    p.add_argument("--out_dir", default=HERE, help="where to write train.bin, val.bin, meta.pkl")
    args = p.parse_args()
    s = prepare(read_input(args.input), args.out_dir)
    print(f"{s['chars']:,} characters, vocab size {s['vocab_size']}; "
          f"train {s['train']:,} tokens, val {s['val']:,} tokens -> {args.out_dir}")
