"""Random training batches from nanoGPT-format token files.

    data_dir/<dataset>/train.bin, val.bin   flat token ids, np.uint16 (or meta.pkl's dtype: uint32)
    data_dir/<dataset>/meta.pkl             optional; gives vocab_size (see data/tokenizer.py) and, when
                                            data/prepare.py wrote it, each document's first token

Rows of a batch, by `documents` (train.py's key):
    stream   a window at any offset, across document boundaries (nanoGPT);
    aligned  every row starts at a document's first token (then runs on into the next documents);
    masked   aligned rows, plus for each token its position in its document and its document's
             index in the row, for a model that keeps attention inside a document.
"""
import os
import pickle
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import torch

try:
    import fcntl
except ImportError:  # Windows: no flock; preparing is not guarded there
    fcntl = None

HERE = os.path.dirname(os.path.abspath(__file__))
SPLITS = ("train", "val")
DOCUMENTS = ("stream", "aligned", "masked")


def known_datasets():
    """Datasets this repo can build: the folders of data/ that hold a prepare.py."""
    return sorted(d for d in os.listdir(HERE) if os.path.isfile(os.path.join(HERE, d, "prepare.py")))


def ensure_prepared(data_dir, dataset):
    """Make sure data_dir/dataset/{train,val}.bin exist, running data/<dataset>/prepare.py if needed.

    Under torchrun every rank calls this at once: an exclusive flock on data_dir/dataset/.prepare.lock
    lets one process prepare while the others wait, then find the files whole."""
    out_dir = os.path.join(data_dir, dataset)
    if not prepared(out_dir) and not os.path.isfile(os.path.join(HERE, dataset, "prepare.py")):
        raise FileNotFoundError(
            f"dataset {dataset!r} is not prepared: {os.path.join(out_dir, 'train.bin')} not found; "
            f"known datasets: {', '.join(known_datasets())}; or write train.bin/val.bin in nanoGPT's format there")
    with prepare_lock(out_dir):
        if not prepared(out_dir):  # checked again under the lock: another process may have prepared it
            run_prepare(os.path.join(HERE, dataset, "prepare.py"), out_dir)


def prepared(out_dir):
    return all(os.path.exists(os.path.join(out_dir, f"{s}.bin")) for s in SPLITS)


@contextmanager
def prepare_lock(out_dir):
    """Hold an exclusive flock on out_dir/.prepare.lock (released when the process dies). Where
    none can be taken (Windows, a read-only folder of prepared data) the files are only read."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd = os.open(os.path.join(out_dir, ".prepare.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        fd = None
    try:
        if fd is not None and fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)  # blocks while another process prepares
        yield
    finally:
        if fd is not None:
            os.close(fd)


def run_prepare(script, out_dir):
    cmd = [sys.executable, script, "--out_dir", out_dir]
    print("preparing:", " ".join(cmd))
    r = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)  # its stdout (the summary) goes to ours
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {why}")
    sys.stderr.write(r.stderr)  # nothing of what it said is swallowed


class TokenData:
    """The two splits of one dataset, memory-mapped. Checks ids against meta.pkl's vocab_size on open."""

    def __init__(self, dir, block_size=None):
        self.dir, self.meta = dir, {}
        if os.path.exists(os.path.join(dir, "meta.pkl")):
            with open(os.path.join(dir, "meta.pkl"), "rb") as f:
                self.meta = pickle.load(f)
        self.vocab_size = self.meta.get("vocab_size")
        self.dtype = np.dtype(self.meta.get("dtype", "uint16"))
        self.splits = {s: self._open(s) for s in SPLITS}
        self.docs = None
        if "docs" in self.meta:
            self.docs = {s: np.asarray(self.meta["docs"][s], dtype=np.int64) for s in SPLITS}
        self._bytes_per_token = dict(self.meta.get("bytes_per_token", {}))
        if self.vocab_size is not None:
            for s, data in self.splits.items():
                top = int(data.max()) if len(data) else -1  # reads the whole file once; ~ms for Shakespeare
                if top >= self.vocab_size:
                    raise ValueError(f"{s}.bin has token id {top} but meta.pkl vocab_size is {self.vocab_size}: "
                                     f"the .bin and meta.pkl come from different preparations; re-run prepare.py")
        if block_size is not None:
            self.check(block_size)

    def _open(self, split):
        path = os.path.join(self.dir, f"{split}.bin")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not found; run the dataset's prepare.py (see data/loader.py)")
        if os.path.getsize(path) == 0:  # np.memmap refuses empty files
            return np.zeros(0, dtype=self.dtype)
        # One memmap for the whole run. nanoGPT re-opens it every batch because of reports of growing
        # memory; the pages here are read-only and file-backed, so the OS can drop them at will.
        return np.memmap(path, dtype=self.dtype, mode="r")

    def check(self, block_size):
        """Each split must hold at least one (x, y) pair of length block_size."""
        for s, data in self.splits.items():
            if len(data) < block_size + 1:
                raise ValueError(f"{s}.bin has {len(data)} tokens, fewer than block_size+1 = {block_size + 1}; "
                                 f"use a smaller --block_size or more data")

    def tokens(self, split):
        """The split's token ids as a read-only np.ndarray (a view, not a copy)."""
        if split not in self.splits:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        return self.splits[split]

    def bytes_per_token(self, split):
        """UTF-8 bytes of the split's text per token (meta.pkl's, else counted from the tokenizer's
        bytes of each id, once); None where the tokenizer cannot say."""
        if split not in self._bytes_per_token:
            from data.tokenizer import token_byte_lengths, tokenizer_entry
            lengths, data = token_byte_lengths(tokenizer_entry(self.meta)), self.tokens(split)
            self._bytes_per_token[split] = float(lengths[data].sum()) / len(data) if lengths is not None else None
        return self._bytes_per_token[split]

    def document_starts(self, split, block_size):
        """The offsets of the split's documents followed by at least block_size + 1 tokens, the
        possible starts of an aligned row; ValueError where the dataset has no documents."""
        if self.docs is None:
            raise ValueError(f"{self.dir} has no document boundaries (its meta.pkl lacks 'docs'); "
                             f"prepare it with data/prepare.py, or use --documents=stream")
        return self.docs[split][self.docs[split] + block_size < len(self.tokens(split))]  # never empty after check()

    def get_batch(self, split, batch_size, block_size, generator, documents="stream"):
        """Random windows: x = tokens[i:i+T], y = tokens[i+1:i+1+T]. Returns int64 CPU tensors (B, T);
        documents="masked" adds pos and doc (B, T): each token's position in its document and its
        document's index in the row (0 for the first).

        Offsets come from `generator` (a CPU torch.Generator) alone, so saving and restoring its
        get_state() reproduces the batch sequence exactly. Moving to the GPU is the caller's job.
        """
        if documents not in DOCUMENTS:
            raise ValueError(f"documents must be one of {', '.join(DOCUMENTS)}, got {documents!r}")
        data = self.tokens(split)
        self.check(block_size)
        if documents == "stream":
            ix = torch.randint(len(data) - block_size, (batch_size,), generator=generator).numpy()  # (B,)
        else:
            starts = self.document_starts(split, block_size)
            ix = starts[torch.randint(len(starts), (batch_size,), generator=generator).numpy()]  # (B,)
        x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix.tolist()])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in ix.tolist()])
        if documents != "masked":
            return x, y  # (B, T), (B, T)
        at = ix[:, None] + np.arange(block_size)                             # (B, T) offsets in the split
        d = np.searchsorted(self.docs[split], at, side="right") - 1          # (B, T) document of each token
        pos, doc = at - self.docs[split][d], d - d[:, :1]
        return x, y, torch.from_numpy(pos), torch.from_numpy(doc)
