"""context_use.py: context gain is 1 exactly when the model cannot see the longer context,
and the per-position curve of a checkpoint averages to evaluation.py's non-overlapping loss."""
import csv
import math

import matplotlib.colors
import numpy as np
import pytest
import torch

from measure import context_use
from measure import evaluation
from training.checkpoint import load_model
from tests.conftest import tiny_gpt

L = 16


def stream(n, seed=0):
    return torch.randint(0, 40, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("pos", ["rope", "alibi"])
def test_gain_is_one_when_the_window_is_the_shortest_context(pos):
    """One layer, attention window L, stride 1: every scored target sees exactly L tokens,
    whether the forward pass holds L, 2L or 4L of them."""
    model = tiny_gpt(pos, n_layer=1, window=L)
    rows = context_use.context_gain(model, stream(4 * L + 40), L, multiples=(1, 2, 4), stride=1, scored_tokens=40)
    assert [r["context"] for r in rows] == [L, 2 * L, 4 * L] and all(r["tokens"] == 40 for r in rows)
    for r in rows:
        assert r["gain"] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("window, blind", [(7, True), (8, False)])
def test_gain_is_one_only_while_the_receptive_field_fits(window, blind):
    """Two layers see n_layer (w - 1) + 1 tokens back: 13 (w = 7) fits the least context
    L - S + 1 = 13 of stride 4, 15 (w = 8) does not, and the longer windows change the loss
    (by ~1e-5 in this random model; float noise is ~3e-8)."""
    model = tiny_gpt("rope", n_layer=2, window=window)
    rows = context_use.context_gain(model, stream(8 * L + 64), L, multiples=(1, 2, 8), stride=4, scored_tokens=64)
    gains = [r["gain"] for r in rows]
    if blind:
        assert gains == pytest.approx([1.0] * 3, abs=2e-7)
    else:
        assert max(abs(g - 1) for g in gains) > 2e-6


def test_gain_counts_the_same_targets_with_more_context():
    """Without a window, context C scores the same targets as context L: the losses are
    those of the targets at the ends of the longer windows, recomputed directly here."""
    model = tiny_gpt("rope", n_layer=2)
    toks = stream(4 * L + 24)
    rows = context_use.context_gain(model, toks, L, multiples=(1, 4), stride=8, scored_tokens=24)
    for r in rows:
        c, nll = r["context"], []
        for end in (4 * L, 4 * L + 8, 4 * L + 16):                    # three windows of stride 8
            with torch.no_grad():
                logits, _ = model(toks[None, end - c:end])
            nll.append(torch.nn.functional.cross_entropy(logits[0, -8:], toks[end - 7:end + 1]))
        assert r["loss"] == pytest.approx(torch.stack(nll).mean().item(), rel=1e-6)
    assert abs(rows[1]["gain"] - 1) > 1e-4


def test_gain_past_a_position_table_is_nan():
    rows = context_use.context_gain(tiny_gpt("learned", block_size=L), stream(4 * L + 8), L, multiples=(1, 2),
                                    stride=8, scored_tokens=8)
    assert rows[0]["gain"] == 1.0 and math.isnan(rows[1]["ppl"]) and rows[1]["tokens"] == 0


def test_per_position_curve_averages_to_the_nonoverlap_loss(tiny_run, tiny_data):
    model, ckpt = load_model(str(tiny_run))
    length = 16 * ckpt["model_args"]["block_size"]
    tokens = np.memmap(tiny_data / "tiny" / "val.bin", dtype=np.uint16, mode="r")
    n = (len(tokens) - 1) // length
    assert n >= 2, "the tiny val split should hold two sequences of 16 L"
    curve, used = context_use.per_position_loss(model, tokens, length, sequences=n)
    assert curve.shape == (length,) and used == n
    rows = evaluation.evaluate_checkpoint(str(tiny_run), [length], "nonoverlap", tokens_per_point=n * length,
                                        data_dir=str(tiny_data))
    assert rows[0]["tokens"] == n * length
    assert curve.mean().item() == pytest.approx(rows[0]["loss"], rel=1e-6)


def test_reports_are_written(tmp_path):
    model = tiny_gpt("rope")
    curve, _ = context_use.per_position_loss(model, stream(2 * 4 * L + 1), 4 * L, sequences=2)
    paths = context_use.write_per_position({"a": curve, "b": curve + 1}, str(tmp_path), train_len=L)
    with open(paths["csv"]) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 4 * L and float(rows[4 * L]["loss"]) == pytest.approx(curve[0].item() + 1, abs=1e-6)
    assert (tmp_path / "per_position.png").stat().st_size > 0
    gain = {"a": context_use.context_gain(model, stream(2 * L + 8), L, multiples=(1, 2), stride=8, scored_tokens=8)}
    paths = context_use.write_context_gain(gain, str(tmp_path))
    md = open(paths["md"]).read()
    assert f"| a | {gain['a'][0]['ppl']:.3f} (1.000) | {gain['a'][1]['ppl']:.3f} ({gain['a'][1]['gain']:.3f}) |" in md


def test_a_binned_per_position_csv_holds_each_position_once_in_log_spaced_bins(tmp_path):
    """A report's per_position.csv (compare.py) is the figure's log-spaced bins: they tile 1 .. T, each row the
    mean loss of its positions, and they are few (the curve itself is kept in each run's result.json.gz)."""
    curve = torch.arange(1000, dtype=torch.float64)   # the loss at position t (1-based) is t - 1
    paths = context_use.write_per_position({"a": curve}, str(tmp_path), train_len=L, binned=True)
    with open(paths["csv"]) as f:
        rows = list(csv.DictReader(f))
    first, last = [int(r["first"]) for r in rows], [int(r["last"]) for r in rows]
    assert first[0] == 1 and last[-1] == 1000 and first[1:] == [n + 1 for n in last[:-1]] and len(rows) < 40
    assert [float(r["loss"]) for r in rows] == pytest.approx([(a + b) / 2 - 1 for a, b in zip(first, last)])


def test_per_position_gives_each_curve_its_own_colour(tmp_path, monkeypatch):
    """The code headline's figure has 11 curves: with matplotlib's 10-colour cycle the 11th took the 1st's."""
    from measure import encoding_plots
    figures = []
    monkeypatch.setattr(encoding_plots, "save", lambda fig, path: figures.append(fig))
    curves = {f"run{i}": torch.full((8,), float(i)) for i in range(11)}
    context_use.write_per_position(curves, str(tmp_path), train_len=4)
    lines = [line for line in figures[0].axes[0].get_lines() if line.get_label() in curves]
    assert len(lines) == 11 and len({tuple(matplotlib.colors.to_rgba(line.get_color())) for line in lines}) == 11


@pytest.mark.parametrize("kw, match", [
    ({"stride": 17}, r"stride must be in \[1, 16\]"),
    ({"multiples": (2, 4)}, "multiples must include 1"),
])
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        context_use.context_gain(tiny_gpt("rope"), stream(8 * L), L, **kw)
    with pytest.raises(ValueError, match="needs at least 257 tokens, got 100"):
        context_use.context_gain(tiny_gpt("rope"), stream(100), L)


@pytest.mark.slow
def test_evaluate_cli_writes_the_context_reports(tiny_run, tiny_data, tmp_path, capsys):
    import evaluate
    evaluate.main([str(tiny_run), f"--data_dir={tiny_data}", f"--report_dir={tmp_path}", "--lengths=16",
                   "--tokens_per_point=64", "--device=cpu", "--context_gain=True", "--per_position=True"])
    out = capsys.readouterr().out
    assert "| run | ppl@16 (gain) | ppl@32 (gain) | ppl@64 (gain) | ppl@128 (gain) | ppl@256 (gain) |" in out
    with open(tmp_path / "context_gain.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["context"]) for r in rows] == [16, 32, 64, 128, 256] and float(rows[0]["gain"]) == 1.0
    assert all(int(r["tokens"]) == 64 for r in rows)
    with open(tmp_path / "per_position.csv") as f:
        assert len(list(csv.DictReader(f))) == 256
    assert (tmp_path / "per_position.png").exists() and (tmp_path / "extrapolation.md").exists()
