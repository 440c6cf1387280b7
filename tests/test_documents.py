"""Documents in training and evaluation: aligned and masked rows (data/loader.py), the masked train
step (train.py), bits per byte, per-document evaluation, --data, and the whole path end to end."""
import json
import math
import os
import pickle

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import train
from data.loader import TokenData
from data.documents import prepare
from measure.evaluation import evaluate_checkpoint
from model import GPT
from tests.conftest import TINY_ARGS, run_py
from training import checkpoint
from training.checkpoint import load_model
from tests.inproc import one_line_error, train_error

T = 8


def offsets_dataset(d, lengths):
    """A dataset whose token at offset i is i (uint32), so a row's first token is its offset;
    documents of the given lengths in both splits."""
    n = sum(lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    os.makedirs(d, exist_ok=True)
    for split in ("train", "val"):
        np.arange(n, dtype=np.uint32).tofile(os.path.join(d, f"{split}.bin"))
    with open(os.path.join(d, "meta.pkl"), "wb") as f:
        pickle.dump(dict(vocab_size=n, dtype="uint32", docs={"train": starts, "val": starts}), f)
    return TokenData(str(d)), starts


def test_aligned_rows_start_at_document_starts(tmp_path):
    data, starts = offsets_dataset(tmp_path, [3, 20, 5, 9, 30, 2, 4])
    x, y = data.get_batch("train", 256, T, torch.Generator().manual_seed(0), "aligned")
    first = set(x[:, 0].tolist())
    # every row starts at a document start that leaves T + 1 tokens (not 67, 69 of 73); all such starts get drawn
    assert first == {0, 3, 23, 28, 37}
    assert (x == x[:, :1] + torch.arange(T)).all() and (y == x + 1).all()   # contiguous, across documents
    again = data.get_batch("train", 256, T, torch.Generator().manual_seed(0), "aligned")
    assert all(torch.equal(a, b) for a, b in zip((x, y), again))


def test_masked_rows_restart_positions_and_number_documents(tmp_path):
    data, starts = offsets_dataset(tmp_path, [3, 20, 5, 9, 30, 2, 12])
    x, y, pos, doc = data.get_batch("val", 64, T, torch.Generator().manual_seed(1), "masked")
    assert set(x[:, 0].tolist()) <= set(starts.tolist())
    for row, p, d in zip(x.tolist(), pos.tolist(), doc.tolist()):
        own = [max(s for s in starts if s <= i) for i in row]             # the start of each token's document
        assert p == [i - s for i, s in zip(row, own)]
        assert d == [sorted(set(own)).index(s) for s in own]               # 0 for the row's first document
    assert (pos == 0).sum() == (doc[:, 1:] != doc[:, :-1]).sum() + len(x)   # a new document: position 0


def test_stream_rows_are_as_before(tmp_path):
    data, _ = offsets_dataset(tmp_path, [50, 50])
    x, _ = data.get_batch("train", 16, T, torch.Generator().manual_seed(2))
    ix = torch.randint(100 - T, (16,), generator=torch.Generator().manual_seed(2))
    assert torch.equal(x[:, 0], ix)


def test_aligned_needs_documents_and_masked_its_own_positions(tiny_data, tmp_path, capsys):
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--documents=aligned"], capsys)
    assert "has no document boundaries (its meta.pkl lacks 'docs'); prepare it with data/prepare.py" in err
    err = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--documents=masked",
                       "--position_sampling=randomized"], capsys)
    assert err == "error: documents=masked sets the positions itself (they restart at each document); drop " \
                  "position_sampling"


@pytest.fixture(scope="module")
def doc_data(tmp_path_factory):
    """A char-level dataset of 12 ASCII documents of 10 to 120 characters, prepared by data/prepare.py."""
    d = tmp_path_factory.mktemp("docs")
    for i in range(12):
        (d / f"{i:02d}.txt").write_text(("abc de fgh " * 12)[: 10 + 10 * i])
    prepare([str(d)], d / "data" / "docs", "char", val_fraction=0.5, seed=1)
    return d / "data"


def doc_args(data_dir, out):
    return [*TINY_ARGS, f"--data_dir={data_dir}", "--dataset=docs", f"--out_dir={out}", "--block_size=8",
            "--max_iters=4", "--eval_interval=2", "--eval_iters=2"]


def test_masked_train_step_calls_the_model_once_per_row(doc_data, tmp_path, monkeypatch):
    real = GPT.forward
    calls = []

    def forward(self, idx, targets=None, pos=None, doc=None):
        calls.append((idx.shape, pos, doc))
        return real(self, idx, targets, pos, doc)

    monkeypatch.setattr(GPT, "forward", forward)
    train.main(doc_args(doc_data, tmp_path / "masked") + ["--documents=masked", "--batch_size=3"])
    rows = [(p, d) for shape, p, d in calls if p is not None]
    assert len(rows) == len(calls) and all(shape == (1, 8) for shape, _, _ in calls)
    assert len(calls) == 3 * (4 + 2 * 3 * 2)   # 3 rows x (4 steps + 3 evaluations x 2 splits x 2 batches)
    for p, d in rows:
        assert p[0] == 0 and d[0] == 0 and ((p[1:] == 0) == (d[1:] != d[:-1])).all()
        assert ((p[1:] == p[:-1] + 1) | (p[1:] == 0)).all()


def test_bits_per_byte_of_a_char_model_on_ascii(tiny_run, tiny_data):
    """bpb = loss / ln 2 x tokens / bytes, with tokens and bytes counted on the scored text itself."""
    rows = evaluate_checkpoint(str(tiny_run), [8, 16], tokens_per_point=300)
    val = TokenData(str(tiny_data / "tiny")).tokens("val")
    with open(tiny_data / "tiny" / "meta.pkl", "rb") as f:
        itos = pickle.load(f)["itos"]
    for r in rows:
        text = "".join(itos[i] for i in val[1:r["tokens"] + 1].tolist())
        assert r["bpb"] == pytest.approx(r["loss"] / math.log(2) * r["tokens"] / len(text.encode()))
        assert r["bpb"] == pytest.approx(r["loss"] / math.log(2))   # ASCII: a byte per token
    with open(tiny_run / "log.jsonl") as f:
        evals = [row for row in map(json.loads, f) if row["event"] == "eval"]
    assert all(row["val_bpb"] == pytest.approx(row["val_loss"] / math.log(2)) for row in evals)


@pytest.fixture(scope="module")
def doc_run(doc_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("doc_run")
    train.main(doc_args(doc_data, out) + ["--documents=aligned"])
    return out


def test_per_document_evaluation_averages_what_it_says(doc_run, doc_data):
    data = TokenData(str(doc_data / "docs"))
    tokens, starts = data.tokens("val"), data.docs["val"]
    lengths = np.diff(np.append(starts, len(tokens)))
    model = load_model(str(doc_run))[0]
    rows = evaluate_checkpoint(str(doc_run), [8, 32, 64, 200], documents=4, data_dir=str(doc_data))
    for r in rows:
        L = r["length"]
        firsts = [s for s, n in zip(starts, lengths) if n >= L + 1][:4]
        assert r["mode"] == "documents" and r["docs"] == len(firsts)
        if not firsts:
            assert math.isnan(r["loss"]) and r["tokens"] == 0
            continue
        losses = []
        for s in firsts:
            x = torch.from_numpy(tokens[s:s + L + 1].astype(np.int64))
            with torch.no_grad():
                losses.append(F.cross_entropy(model(x[None, :-1])[0][0], x[1:]).item())
        assert r["loss"] == pytest.approx(sum(losses) / len(losses), rel=1e-5) and r["tokens"] == L * len(firsts)
        n_bytes = sum(int((tokens[s + 1:s + 1 + L] != data.meta["eot"]).sum()) for s in firsts)  # ASCII; end: 0
        assert r["bpb"] == pytest.approx(r["loss"] / math.log(2) * r["tokens"] / n_bytes)
    assert rows[0]["docs"] == 4 and rows[-1]["docs"] == 0   # no document holds 201 characters


def test_evaluating_on_data_of_another_tokenizer_is_refused(doc_run, doc_data, tmp_path, capsys):
    import evaluate
    prepare([str(doc_data.parent / f"{i:02d}.txt") for i in range(4)], tmp_path / "bytes", "byte")
    err = one_line_error(evaluate.main, [str(doc_run), f"--data={tmp_path / 'bytes'}", f"--report_dir={tmp_path}"],
                         capsys)
    assert err.startswith(f"error: {tmp_path / 'bytes'} was prepared with another tokenizer (byte, 257 ids) than "
                          f"the checkpoint's (char, ")


@pytest.mark.slow
def test_end_to_end_bpe_folder_masked_training_sample_and_per_document_bits_per_byte(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(16):
        (src / f"m{i:02d}.py").write_text(f"def func_{i}(value):\n    return value * {i} + len('{i}')\n" * (4 + i))
    run_py("data/prepare.py", f"--input={src}", "--tokenizer=bpe", "--vocab_size=300",
           f"--out_dir={tmp_path / 'data' / 'code'}", "--val_fraction=0.25")
    assert (tmp_path / "data" / "code" / "tokenizer.json").exists()
    out, env = tmp_path / "out", {"OMP_NUM_THREADS": "1"}
    r = run_py("train.py", *TINY_ARGS, f"--data_dir={tmp_path / 'data'}", "--dataset=code", f"--out_dir={out}",
               "--documents=masked", "--max_iters=6", "--eval_interval=3", env=env)
    assert "val bits/byte" in r.stdout and checkpoint.load(out)["config"]["documents"] == "masked"
    os.rename(tmp_path / "data", tmp_path / "gone")   # sample and evaluate need the checkpoint alone
    r = run_py("sample.py", f"--out_dir={out}", "--start=def func_", "--max_new_tokens=20", "--device=cpu", env=env)
    assert r.stdout.startswith("def func_")
    r = run_py("evaluate.py", str(out), f"--data={src}", "--documents=3", "--lengths=8,16", "--device=cpu", env=env)
    lines = [line for line in r.stdout.splitlines() if "bits/byte" in line and ": loss" in line]
    assert len(lines) == 2 and all(line.endswith(", 3 documents") for line in lines), r.stdout
    assert "| out | rope | base | documents |" in (out / "extrapolation.md").read_text()
