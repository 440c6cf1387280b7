"""Prepare any corpus as documents, in nanoGPT's format (train.bin, val.bin, meta.pkl).

    python data/prepare.py --input=notes.txt --input=more.txt --out_dir=data/notes
    python data/prepare.py --input=src/ --glob='*.py' --tokenizer=byte --out_dir=data/mycode
    python data/prepare.py --input=corpus.jsonl --field=text --tokenizer=bpe --vocab_size=4096 --out_dir=data/mine
    python train.py configs/rope.py --dataset=mine --documents=aligned

Every file (or every record of a .jsonl file) is a document, ended by the end-of-text token.
Whole documents go to train or val (a seeded random fraction of them to val; the same seed gives
the same split). Tokenizers: char (the characters of the corpus), byte (the 256 bytes), bpe (a
byte-level BPE of --vocab_size ids trained on the training documents with HF tokenizers, saved as
tokenizer.json beside the data and inside meta.pkl), tiktoken:NAME (an existing encoding). The
end-of-text token comes on top of each. Ids are uint16, or uint32 past 65,536 ids.

meta.pkl keeps nanoGPT's keys and adds the documents' offsets, bytes per token, sources and split
(docs/data.md). Everything is read and tokenized before anything is written; bad input is one
line, exit status 2.
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # so `import data...` works whatever the cwd
from data.documents import BPE_VOCAB, TOKENIZERS, PrepareError, prepare, summary_line  # noqa: E402


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", action="append", required=True, help="a file, a folder or a .jsonl file (repeatable)")
    p.add_argument("--out_dir", required=True, help="where to write train.bin, val.bin, meta.pkl")
    p.add_argument("--tokenizer", default="char", help=f"one of {', '.join(TOKENIZERS)} (default: char)")
    p.add_argument("--vocab_size", type=int, help=f"ids in all (bpe: the size it trains to, default {BPE_VOCAB})")
    p.add_argument("--glob", default="*", help="file names to take from a folder (default: all)")
    p.add_argument("--field", default="text", help="the text field of .jsonl records (default: text)")
    p.add_argument("--val_fraction", type=float, default=0.1, help="the fraction of documents for val")
    p.add_argument("--seed", type=int, default=0, help="seed of the document split")
    a = p.parse_args(argv)
    try:
        s = prepare(a.input, a.out_dir, a.tokenizer, a.vocab_size, a.glob, a.field, a.val_fraction, a.seed)
    except (PrepareError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(summary_line(s, a.out_dir))


if __name__ == "__main__":
    main(sys.argv[1:])
