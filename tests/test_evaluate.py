"""evaluation.py and evaluate.py: the windows it scores, its agreement between modes, the report files and
the command line's errors, on tiny checkpoints saved directly (no training)."""
import csv
import dataclasses
import math
import os
import pickle
import re

import pytest
import torch

from training import checkpoint
from training import cpu_threads
import evaluate
from measure import evaluation
from tests.conftest import tiny_gpt


def save_tiny(tiny_data, out_dir, pos="rope", block_size=16):
    with open(tiny_data / "tiny" / "meta.pkl", "rb") as f:
        vocab = pickle.load(f)["vocab_size"]
    model = tiny_gpt(pos, vocab_size=vocab, block_size=block_size)
    checkpoint.save({"model": model.state_dict(), "model_args": dataclasses.asdict(model.config),
                     "config": {"data_dir": str(tiny_data), "dataset": "tiny", "wandb_project": "posgpt"},
                     "iter_num": 0}, checkpoint.path_in(out_dir))
    return model


def test_spans_cover_every_target_once():
    assert evaluation.spans(10, 4, 4) == [(0, 0), (4, 0), (6, 2)]
    assert evaluation.spans(10, 4, 2) == [(0, 0), (2, 2), (4, 2), (6, 2)]
    for n, length, stride in [(37, 8, 3), (64, 16, 16), (16, 16, 1)]:
        windows = evaluation.spans(n, length, stride)
        assert [t for s, o in windows for t in range(s + o, s + length)] == list(range(n))
        assert all(s >= 0 and s + length <= n for s, _ in windows)


def test_score_equals_the_models_own_loss():
    model = tiny_gpt("alibi")
    tokens = torch.randint(0, 40, (65,))
    nll, ids = evaluation.score(model, tokens, evaluation.spans(64, 16, 16), 16, batch_tokens=32)
    with torch.no_grad():
        want = [model(tokens[i:i + 16][None], tokens[i + 1:i + 17][None])[1].item() for i in (0, 16, 32, 48)]
    assert ids.tolist() == tokens[1:].tolist() and (nll / 16).tolist() == pytest.approx(want, rel=1e-5)


def test_chunks_spread_evenly_without_overlap_by_hand():
    # 100 tokens, chunks of 10 targets: 9 possible starts 0, 10, ..., 80 (a chunk at 90 would need token 100)
    assert evaluation.chunk_starts(100, 10, 30).tolist() == [10, 40, 70]         # ranks 1, 4, 7 of 0..8
    assert evaluation.chunk_starts(100, 10, 25).tolist() == [10, 40, 70]         # ceil(25 / 10) chunks
    assert evaluation.chunk_starts(100, 10, 10).tolist() == [40]                 # the middle one
    assert evaluation.chunk_starts(100, 10, 10 ** 6).tolist() == list(range(0, 90, 10))   # all: the whole split
    # documents at 0, 4, 15, 50, 52, 95: 4 and 52 lie in the chunk before them, 95 leaves no 10 targets
    assert evaluation.chunk_starts(100, 10, 100, [0, 4, 15, 50, 52, 95]).tolist() == [0, 15, 50]
    assert evaluation.chunk_starts(100, 10, 20, [0, 4, 15, 50, 52, 95]).tolist() == [0, 50]


def test_every_length_scores_the_same_chunks_spread_over_the_split(tiny_data, tmp_path):
    model = save_tiny(tiny_data, tmp_path, "t5")
    val = torch.from_numpy(evaluation.validation_tokens(checkpoint.load(str(tmp_path)), None)[0].astype("int64"))
    starts = evaluation.chunk_starts(len(val), 48, 200)
    assert len(starts) == 5 and starts[-1] > 3 * len(val) // 4      # ceil(200 / 48) chunks, not the first 240 tokens
    a = evaluation.evaluate_checkpoint(str(tmp_path), [16, 48], "nonoverlap", tokens_per_point=200)
    b = evaluation.evaluate_checkpoint(str(tmp_path), [16, 48], "sliding", stride=None, tokens_per_point=200)
    c = evaluation.evaluate_checkpoint(str(tmp_path), [16, 48], "sliding", stride=16, tokens_per_point=200)
    assert c[0]["loss"] == pytest.approx(a[0]["loss"], rel=1e-6)   # sliding with stride = length is nonoverlap
    assert [r["tokens"] for r in a] == [r["tokens"] for r in b] == [240, 240]   # the same tokens at every length
    assert a[0]["loss"] != pytest.approx(b[0]["loss"], rel=1e-6)   # at 16, stride 8 gives more context
    with torch.no_grad():   # at the longest length a chunk is one window: its loss is the model's own
        want = [model(val[s:s + 48][None], val[s + 1:s + 49][None])[1].item() for s in starts.tolist()]
    assert a[1]["chunk_loss"] == pytest.approx(want, rel=1e-5) and b[1]["chunk_loss"] == pytest.approx(want, rel=1e-5)
    assert [sum(r["chunk_loss"]) / 5 for r in a + b] == pytest.approx([r["loss"] for r in a + b], rel=1e-9)


@pytest.mark.slow
def test_cli_writes_table_csv_and_png_with_na_for_learned(tiny_data, tmp_path, capsys):
    save_tiny(tiny_data, tmp_path / "rope", "rope")
    save_tiny(tiny_data, tmp_path / "learned", "learned")
    rows = evaluate.main([str(tmp_path / "rope"), str(tmp_path / "learned"), "--lengths=16,32",
                          "--tokens_per_point=64", "--rope_scaling=base,yarn", "--rope_factor=2",
                          f"--report_dir={tmp_path / 'rep'}"])
    out = capsys.readouterr()
    assert "(learned) does not take rope_scaling=yarn; skipped" in out.err
    assert [(r["encoding"], r["method"], r["length"]) for r in rows] == [
        ("rope", "base", 16), ("rope", "base", 32), ("rope", "yarn x2", 16), ("rope", "yarn x2", 32),
        ("learned", "base", 16), ("learned", "base", 32)]
    assert math.isnan(rows[-1]["ppl"]) and rows[-1]["tokens"] == 0 and not math.isnan(rows[-2]["ppl"])
    with open(tmp_path / "rep" / "extrapolation.csv") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == list(evaluation.COLUMNS) and len(table) == 6 + 3 * 2 and table[5]["ppl"] == "n/a"
    assert [(r["encoding"], r["method"], r["length"]) for r in table[6:8]] == [("ngram", "3-gram", "16"),
                                                                               ("ngram", "3-gram", "32")]
    assert float(table[0]["ppl"]) == pytest.approx(math.exp(float(table[0]["loss"])), rel=1e-5)
    md = open(tmp_path / "rep" / "extrapolation.md").read()
    assert "| learned | learned | base | nonoverlap |" in md and "n/a" in md and "| 16 | 32 |" in md
    assert "| count model | ngram | 5-gram | nonoverlap |" in md
    assert open(tmp_path / "rep" / "extrapolation.png", "rb").read(4) == b"\x89PNG"
    assert "| rope | rope | yarn x2 | nonoverlap |" in out.out


@pytest.mark.parametrize("args, message", [
    (["--lengths=16,100000"], r"val.bin in .* has \d+ tokens; evaluation length 100000 needs at least 100001"),
    (["--rope_scaling=yarm"], "unknown rope_scaling 'yarm'"),
    (["--rope_scaling=linear", "--rope_factor=0"], "rope_factor must be > 0"),
    (["--window=0"], "--window must be >= 1"),
    (["--sinks=4"], "needs a window"),
    (["--mode=sliding", "--stride=40", "--lengths=16"], "stride must be in"),
    (["--lenghts=16"], "unknown option --lenghts"),
    (["--threads=-1"], "--threads must be >= 0"),
    (["--retrieval_probe=0,2"], "--retrieval_probe wants True or distances in units of L"),
    (["--retrieval_probe=True", "--probe_spans=1"], "--probe_spans must be >= 2"),
    (["--lengths=16", "--retrieval_probe=1000"], "the validation split has \\d+: use shorter distances"),
])
def test_cli_bad_input(tiny_data, tmp_path, capsys, args, message):
    save_tiny(tiny_data, tmp_path)
    with pytest.raises(SystemExit) as e:
        evaluate.main([str(tmp_path), *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err
    assert not os.path.exists(tmp_path / "extrapolation.csv")


def test_cli_retrieval_probe_prints_and_writes_its_table(tiny_data, tmp_path, capsys):
    """--retrieval_probe: a row per checkpoint and distance, the same windows for both checkpoints, n/a where a
    learned table has no positions, a void line per checkpoint."""
    save_tiny(tiny_data, tmp_path / "rope", "rope")
    save_tiny(tiny_data, tmp_path / "learned", "learned")
    evaluate.main([str(tmp_path / "rope"), str(tmp_path / "learned"), "--lengths=16", "--tokens_per_point=32",
                   "--retrieval_probe=2,4", "--probe_spans=8", f"--report_dir={tmp_path / 'rep'}"])
    out = capsys.readouterr().out
    assert re.search(r"\| rope base \| 32 \| 2 \| 95 \| \d\.\d{3} \| \d\.\d{3} \| [+-]", out)
    assert "| learned base | 64 | 4 | 127 | n/a | n/a | n/a | n/a | n/a |" in out
    assert "- rope base: no window fits in L: **void**" in out
    with open(tmp_path / "rep" / "retrieval_probe.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["run"], r["distance"], r["windows"]) for r in table] == [
        ("rope base", "32", "8"), ("rope base", "64", "8"), ("learned base", "32", "8"), ("learned base", "64", "8")]
    assert table[2]["probe"] == "nan" and os.path.exists(tmp_path / "rep" / "retrieval_probe.md")


@pytest.mark.slow
def test_cli_picks_its_threads_unless_given(tiny_data, tmp_path, capsys, monkeypatch):
    save_tiny(tiny_data, tmp_path)
    before = torch.get_num_threads()
    try:
        evaluate.main([str(tmp_path), "--lengths=16", "--tokens_per_point=32", "--threads=2"])
        assert "float32; 2 thread(s): --threads)" in capsys.readouterr().out and torch.get_num_threads() == 2
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.setattr(cpu_threads.os, "cpu_count", lambda: 2)
        snapshots = iter([(1000, 500), (1200, 600)])           # one of two cores busy over the sample
        monkeypatch.setattr(cpu_threads, "cpu_times", lambda: next(snapshots))
        evaluate.main([str(tmp_path), "--lengths=16", "--tokens_per_point=32", "--overwrite=True"])
        assert "float32; 1 thread(s): 2 cores, 1.0 busy with other work now" in capsys.readouterr().out
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_cli_refuses_scaling_when_no_checkpoint_is_rotary(tiny_data, tmp_path, capsys):
    save_tiny(tiny_data, tmp_path, "alibi")
    with pytest.raises(SystemExit):
        evaluate.main([str(tmp_path), "--rope_scaling=yarn", "--rope_factor=4"])
    assert ("--rope_scaling=yarn needs a checkpoint of rope, xpos, p_rope, resonance_rope, rope_learned_freq, hope, "
            "rope+alibi; none of") in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs a rotary encoding"):
        evaluation.evaluate_checkpoint(str(tmp_path), [16], overrides={"rope_scaling": "yarn", "rope_factor": 4.0})


@pytest.mark.slow
def test_rerope_is_skipped_for_xpos_only(tiny_data, tmp_path, capsys):
    save_tiny(tiny_data, tmp_path / "x", "xpos")
    save_tiny(tiny_data, tmp_path / "r", "rope")
    rows = evaluate.main([str(tmp_path / "x"), str(tmp_path / "r"), "--lengths=32", "--tokens_per_point=32",
                          "--rope_scaling=rerope,ntk", "--rope_factor=2"])
    methods = [(r["encoding"], r["method"]) for r in rows]
    assert methods == [("xpos", "ntk x2"), ("rope", "rerope w8"), ("rope", "ntk x2")]
    assert "(xpos) does not take rope_scaling=rerope" in capsys.readouterr().err


def test_window_and_sinks_are_applied(tiny_data, tmp_path):
    save_tiny(tiny_data, tmp_path, "alibi")
    full, = evaluation.evaluate_checkpoint(str(tmp_path), [32], tokens_per_point=64)
    wide, = evaluation.evaluate_checkpoint(str(tmp_path), [32], tokens_per_point=64, overrides={"window": 32})
    narrow, = evaluation.evaluate_checkpoint(str(tmp_path), [32], tokens_per_point=64,
                                             overrides={"window": 4, "sinks": 2})
    assert wide["loss"] == pytest.approx(full["loss"], rel=1e-6) and narrow["loss"] != pytest.approx(full["loss"])
    assert narrow["method"] == "window 4 sinks 2"


def test_per_layer_windows_are_named_in_the_method(tiny_data, tmp_path):
    """B5: an evaluation with layer_windows is labelled by its windows, not "base" (which the full model is)."""
    save_tiny(tiny_data, tmp_path, "alibi")
    full, = evaluation.evaluate_checkpoint(str(tmp_path), [32], tokens_per_point=64)
    local, = evaluation.evaluate_checkpoint(str(tmp_path), [32], tokens_per_point=64,
                                            overrides={"layer_windows": "4,0"})
    sunk, = evaluation.evaluate_checkpoint(str(tmp_path), [32], tokens_per_point=64,
                                           overrides={"layer_windows": "4,0", "sinks": 2})
    assert full["method"] == "base" and local["loss"] != pytest.approx(full["loss"])
    assert local["method"] == "windows 4,0" and sunk["method"] == "windows 4,0 sinks 2"


def test_a_long_evaluation_says_how_far_it_is(tiny_data, tmp_path, capsys, monkeypatch):
    """Progress with an estimate on stderr, layer by layer through each window (measure/progress.py), once the work
    has run a few seconds (here at once); the numbers are those of a silent evaluation."""
    from measure import progress
    save_tiny(tiny_data, tmp_path, "rope")
    quiet, = evaluation.evaluate_checkpoint(str(tmp_path), [32], tokens_per_point=64)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "AFTER", 0.0)
    monkeypatch.setattr(progress, "EVERY", 0.0)
    loud, = evaluation.evaluate_checkpoint(str(tmp_path), [32], tokens_per_point=64)
    lines = capsys.readouterr().err.splitlines()
    assert loud["loss"] == quiet["loss"] and lines and all(
        re.fullmatch(r"\[evaluate\] length 32: \d+% of 2 windows, \d+ s, ~\d+ s left", line) for line in lines)


@pytest.mark.slow
def test_wandb_offline_run_has_the_table_and_plot(tiny_data, tmp_path):
    from tests.conftest import run_py
    from tests.wandb_reader import history
    save_tiny(tiny_data, tmp_path / "ckpt")
    env = {"WANDB_MODE": None, "WANDB_API_KEY": None, "HOME": str(tmp_path), "NETRC": str(tmp_path / "none")}
    run_py("evaluate.py", str(tmp_path / "ckpt"), "--lengths=16,32", "--tokens_per_point=64", "--wandb_log=True",
           f"--report_dir={tmp_path / 'rep'}", env=env, timeout=120)
    runs = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path / "rep" / "wandb") for f in fs if f.endswith(".wandb")]
    assert len(runs) == 1
    row = {k: v for r in history(runs[0]) for k, v in r.items()}
    assert row["extrapolation/table/_type"] == "table-file" and row["extrapolation/table/nrows"] == 2
    assert row["extrapolation/plot/_type"] == "image-file"
    assert row["extrapolation/ppl_table/_type"] == "table-file"     # the line plot's data
