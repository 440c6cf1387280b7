"""The retrieval probe (measure/retrieval_probe.py): its windows hold what it says, it fails exactly where the copy is
out of the model's reach, and a model that copies shows a gain in range."""
import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from measure import retrieval_probe as rp
from tests.conftest import tiny_gpt

TOKENS = np.random.default_rng(0).integers(0, 40, 3000)     # "validation text" over tiny_gpt's 40 ids


def test_windows_repeat_the_span_and_the_control_differs_only_in_the_first_slot():
    w = rp.make_windows(TOKENS, 20, spans=16, span=6, seed=3)
    first, second = w.first, w.first + 20
    assert w.probe.shape == w.control.shape == (16, 6 + 20 + 6) and w.length == 31
    assert np.array_equal(w.probe[:, first:first + 6], w.probe[:, second:second + 6])      # the second copy is X
    assert np.array_equal(w.control[:, second:], w.probe[:, second:])                      # ... in both windows
    outside = np.ones(w.length + 1, bool)
    outside[first:first + 6] = False
    assert np.array_equal(w.probe[:, outside], w.control[:, outside])                      # same filler, same copy
    assert all(not np.array_equal(p, c) for p, c in zip(w.probe[:, first:first + 6], w.control[:, first:first + 6]))
    text = TOKENS.tobytes()
    assert all(row.astype(TOKENS.dtype).tobytes() in text for row in w.probe[:, :first])   # filler: validation text
    assert w.scored == slice(second, second + 5)          # loss j predicts token j + 1: the copy after its first token
    again = rp.make_windows(TOKENS, 20, spans=16, span=6, seed=3)                          # the same for every model
    assert np.array_equal(again.probe, w.probe) and np.array_equal(again.control, w.control)
    assert not np.array_equal(rp.make_windows(TOKENS, 20, spans=16, span=6, seed=4).probe, w.probe)


def test_bad_settings_say_what_to_change():
    with pytest.raises(ValueError, match="shorter than the span 8: the copies would overlap"):
        rp.make_windows(TOKENS, 4, span=8)
    with pytest.raises(ValueError, match="the validation split has 3000: use shorter distances"):
        rp.make_windows(TOKENS, 4000, span=8)
    assert rp.distances(128) == [32, 64, 128, 256, 512, 1024, 2048]
    assert rp.distances(64, span=32) == [32, 64, 128, 256, 512, 1024]     # 0.25 L = 16 < S: the span, once


def test_a_copy_out_of_reach_gives_exactly_equal_losses():
    """Window w = 8 on n = 2 layers: an output sees n (w - 1) = 14 inputs back, so at d - S + 1 > 14 nothing of
    the first copy reaches a scored prediction: the two losses are equal to the bit, and the probe is void."""
    model = tiny_gpt("rope", window=8)
    rows = rp.measure(model, TOKENS, 32, dists=[16, 32, 64], spans=16, span=4)
    near, far, farther = rows
    assert not np.array_equal(near["probe"], near["control"])          # d - S + 1 = 13 <= 14: in reach, different
    for r in (far, farther):                                            # 29 and 61 > 14
        assert np.array_equal(r["probe"], r["control"])
    summary = rp.summarize([rows], 32)
    assert summary[1]["gain"] == 0 and summary[1]["lo"] == summary[1]["hi"] == 0
    assert rp.void([[dict(r, in_range=True) for r in rows[1:]]])[0]


def train_copier(steps=300, span=6, distance=16, seed=0):
    """tiny_gpt trained on random sequences whose span at position `span` comes back `distance` later."""
    model = tiny_gpt("rope", seed=seed).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        seq = torch.randint(0, 40, (32, 2 * span + distance), generator=g)
        seq[:, span + distance:] = seq[:, span:2 * span]
        logits, _ = model(seq[:, :-1])
        loss = F.cross_entropy(logits.transpose(1, 2), seq[:, 1:], reduction="none")[:, span + distance:].mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def test_a_model_that_copies_gains_in_range_and_is_not_void():
    model = train_copier()
    tokens = np.random.default_rng(1).integers(0, 40, 3000)           # other text than it trained on
    runs = [rp.measure(model, tokens, 32, dists=[16], spans=32, span=6)]
    s = rp.summarize(runs, 32)[0]
    assert s["in_range"] and s["length"] == 27
    assert s["lo"] > 0.5 and s["control"] > s["probe"] + 0.5 and 0 < s["fraction"] < 1
    is_void, (mean, lo, hi) = rp.void(runs)
    assert not is_void and lo > 0.5
    as_json = [[dict(r, probe=r["probe"].tolist(), control=r["control"].tolist()) for r in runs[0]]]   # a run's record
    assert rp.void(as_json) == (is_void, (mean, lo, hi)) and rp.summarize(as_json, 32)[0]["gain"] == s["gain"]
    text = "\n".join(rp.table_lines({"copier": runs, "blind": [[dict(r, probe=r["control"]) for r in runs[0]]]}, 32))
    assert "- copier: in-range gain" in text and "retrieves inside L" in text
    assert "- blind: in-range gain +0.0000 [+0.0000, +0.0000] nats/token: **void**" in text


def test_seeds_pair_on_the_same_windows_and_positions_past_a_table_are_not_measured(tmp_path):
    """Two seeds: the primary interval is t over the seeds' mean gains; a learned table shorter than the window: n/a."""
    g = np.random.default_rng(0)
    rows = lambda shift: [dict(distance=8, length=15, in_range=True, probe=g.normal(1, 0.1, 64) - shift,  # noqa: E731
                               control=np.ones(64))]
    runs = [rows(0.2), rows(0.3)]
    s = rp.summarize(runs, 32)[0]
    means = [float((r[0]["control"] - r[0]["probe"]).mean()) for r in runs]
    half = 12.706204736 * abs(means[0] - means[1]) / math.sqrt(2) / math.sqrt(2)      # t(0.975, 1) sd / sqrt(2)
    assert s["interval"] == "t over 2 seeds" and s["lo"] == pytest.approx(np.mean(means) - half)
    learned = tiny_gpt("learned")                                                        # 32 positions
    assert all(math.isnan(v) for v in rp.score(learned, rp.make_windows(TOKENS, 40, spans=4, span=4))[0])
    paths = rp.write({"a": runs}, str(tmp_path), 32)
    assert "| a | 8 | 0.25 | 15 |" in open(paths[".md"]).read()
    assert len(open(paths["_windows.csv"]).read().splitlines()) == 1 + 2 * 2          # seeds x arms
    assert open(paths[".png"], "rb").read(4) == b"\x89PNG"


def test_a_small_but_significant_gain_is_still_void():
    """A gain whose interval excludes zero but whose mean is below CLEAR is no clear retrieval; at CLEAR and above
    (the same spread) the probe reads past L."""
    spread = np.linspace(-0.01, 0.01, 64)
    def runs(gain):
        return [[dict(in_range=True, control=list(2.0 + spread), probe=list(2.0 - gain + 0 * spread))]]
    assert rp.void(runs(rp.CLEAR / 2))[0] and rp.void(runs(rp.CLEAR / 2))[1][1] > 0
    assert not rp.void(runs(rp.CLEAR * 2))[0]
