"""measure/ngram.py and measure/stats.py against values computed by hand; the n-gram rows of
compare.py's report scored on the runs' targets, and its marker of runs worse than the 4-gram."""
import csv
import math

import numpy as np
import pytest

from comparison import lm_suite
from measure import compare_report, evaluation
from measure.ngram import NGram, baseline_rows, window_reach
from measure.stats import bootstrap, paired, reciprocal_ranks


def test_bigram_absolute_discounting_by_hand():
    # train 0 1 0 1 1, V = 3 (token 2 never seen), d = 0.5
    # unigram: c = (2, 3, 0), N = 5, 2 types: P1(w) = max(c - .5, 0)/5 + .5*2/5 * 1/3
    p1 = [1.5 / 5 + 0.2 / 3, 2.5 / 5 + 0.2 / 3, 0.2 / 3]
    # bigrams (0,1)x2 (1,0)x1 (1,1)x1: c(0.)=2, N1+(0.)=1; c(1.)=2, N1+(1.)=2
    p_1_after_0 = 1.5 / 2 + 0.5 * 1 / 2 * p1[1]
    p_0_after_1 = 0.5 / 2 + 0.5 * 2 / 2 * p1[0]
    p_2_after_1 = 0.5 * 2 / 2 * p1[2]           # unseen bigram: the back-off mass alone
    p_1_after_2 = p1[1]                          # unseen history: the unigram
    m = NGram(np.array([0, 1, 0, 1, 1]), 2, 3, d=0.5)
    got = m.probs(np.array([1, 0, 1, 2, 1]), start=1)
    np.testing.assert_allclose(got, [p_0_after_1, p_1_after_0, p_2_after_1, p_1_after_2], rtol=1e-12)
    assert m.perplexity(np.array([1, 0, 1, 2, 1])) == pytest.approx(math.exp(-np.log(got).mean()))


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_probabilities_sum_to_one_over_the_vocabulary(n):
    rng = np.random.default_rng(0)
    train, V = rng.integers(0, 5, 300), 6
    m = NGram(train, n, V)
    context = rng.integers(0, 6, 8)
    total = sum(m.probs(np.append(context, w), start=len(context))[0] for w in range(V))
    assert total == pytest.approx(1.0, abs=1e-12)


def test_paired_statistics_by_hand():
    p = paired([3.0, 2.0, 4.0], [2.0, 2.5, 1.0])           # differences 1, -0.5, 3
    assert p.mean == pytest.approx(3.5 / 3)
    assert p.sd == pytest.approx(math.sqrt(((1 - 3.5 / 3) ** 2 + (-0.5 - 3.5 / 3) ** 2 + (3 - 3.5 / 3) ** 2) / 2))
    assert (p.agree, p.n) == (2, 3)
    half = 4.303 * p.sd / math.sqrt(3)                        # Student's t, 2 degrees of freedom
    assert p.interval() == pytest.approx((p.mean - half, p.mean + half)) and not p.is_result
    assert paired([1.0, 1.1, 0.9], [0.0, 0.0, 0.0]).interval() == pytest.approx((1 - 4.303 * 0.1 / math.sqrt(3),
                                                                                 1 + 4.303 * 0.1 / math.sqrt(3)))
    assert math.isnan(paired([1.0], [0.0]).interval()[0]) and not paired([1.0], [0.0]).is_result


def test_bootstrap_interval_excludes_zero_only_for_a_consistent_difference():
    lo, hi = bootstrap(np.full((2, 50), 0.3) + np.linspace(-0.01, 0.01, 50))
    assert 0.29 < lo <= hi < 0.31
    rng = np.random.default_rng(1)
    lo, hi = bootstrap(rng.normal(0.0, 1.0, (1, 200)), seed=3)
    assert lo < 0 < hi
    assert paired([1, 1], [0, 0], np.ones((2, 10)), np.zeros((2, 10))).is_result


def test_a_seed_that_disagrees_in_sign_makes_no_result_even_when_the_interval_excludes_zero():
    """The bootstrap resamples documents with the seeds fixed: seed 1 better by 1.0 on every document, seed 2 worse
    by 0.5 on every one gives the interval [-0.25, -0.25] around the mean -0.25, which excludes zero, but one seed of
    two says the opposite: not a result."""
    a = np.stack([np.zeros(10), np.full(10, 1.5)])
    b = np.stack([np.ones(10), np.ones(10)])
    p = paired(a.mean(1), b.mean(1), a, b)                   # differences -1.0 and +0.5
    assert (p.mean, p.agree, p.n) == (pytest.approx(-0.25), 1, 2)
    assert p.interval() == pytest.approx((-0.25, -0.25)) and not p.is_result
    assert paired(a.mean(1) * 0, b.mean(1), a * 0, b).is_result   # both seeds -1.0: a result


def test_reciprocal_ranks_share_ties():
    rr = reciprocal_ranks({"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1})
    assert rr == {"a": 1.0, "b": pytest.approx((1 / 2 + 1 / 3) / 2), "c": pytest.approx((1 / 2 + 1 / 3) / 2),
                  "d": 0.25}
    assert sum(reciprocal_ranks({"x": 0, "y": 0, "z": 0}).values()) == pytest.approx(1 + 1 / 2 + 1 / 3)


# ---------------------------------------------------------------- the baselines in the reports
def test_window_reach_follows_the_evaluation_windows():
    # spans(10, 4, 2): window [0, 4) scores targets 0..3, then windows at 2, 4, 6 their last two each
    assert window_reach(10, 4, 2).tolist() == [1, 2, 3, 4, 3, 4, 3, 4, 3, 4]
    assert window_reach(8, 4, 4).tolist() == [1, 2, 3, 4, 1, 2, 3, 4]


def test_trigram_rows_on_abab_by_hand():
    """Train "abab..." (100 tokens, V = 2), d = 0.75: the trigram is near-certain, and only a target
    at a window's start (history cut to one token) falls back to the bigram."""
    train, val = np.arange(100) % 2, np.arange(33) % 2
    p2_b_a = 49.25 / 50 + 0.75 / 50 * 0.5                       # unigram: 49.25 / 100 + 0.75 * 2 / 100 / 2 = 0.5
    p2_a_b = 48.25 / 49 + 0.75 / 49 * 0.5
    p3_a_ab = 48.25 / 49 + 0.75 / 49 * p2_a_b                   # c(a b a) = c(a b .) = 49
    p3_b_ba = 48.25 / 49 + 0.75 / 49 * p2_b_a                   # c(b a b) = c(b a .) = 49
    want = {4: [p2_b_a, p3_a_ab, p3_b_ba, p3_a_ab] * 8, 8: [p2_b_a] + [p3_a_ab, p3_b_ba] * 3 + [p3_a_ab]}
    rows = baseline_rows(train, val, 2, np.ones(2, dtype=np.int64), None, [4, 8], 32, orders=(3,))   # 4 chunks of 8
    for row in rows:
        p = np.resize(want[row["length"]], 32)
        assert (row["label"], row["encoding"], row["method"], row["tokens"]) == ("3-gram", "ngram", "3-gram", 32)
        assert row["ppl"] == pytest.approx(math.exp(-np.log(p).mean()), rel=1e-12)
        assert row["bpb"] == pytest.approx(row["loss"] / math.log(2))     # one byte per token
    assert 1 < rows[1]["ppl"] < rows[0]["ppl"] < 1.01                      # longer windows: fewer cut histories


def test_compare_baselines_score_the_targets_of_the_runs(tiny_run, tiny_data, tmp_path):
    from types import SimpleNamespace
    from data.loader import TokenData
    settings = dict(eval_lengths=[16, 32], eval_tokens=64, eval_mode="nonoverlap", report_dir=str(tmp_path))
    cfg = SimpleNamespace(data_dir=str(tiny_data), dataset="tiny")
    rows = lm_suite.baselines([dict(dir=str(tiny_run))], settings, cfg)
    data = TokenData(str(tiny_data / "tiny"))
    train, val = data.splits["train"], np.asarray(data.splits["val"], dtype=np.int64)
    model_rows = evaluation.evaluate_checkpoint(str(tiny_run), [16, 32], tokens_per_point=64, data_dir=str(tiny_data))
    assert {r["tokens"] for r in rows} == {r["tokens"] for r in model_rows} == {64}
    a, b = evaluation.chunk_starts(len(val), 32, 64)           # two chunks of 32 targets, a quarter and
    assert a < len(val) // 2 < b                               # three quarters into the split
    for row in rows:
        order, length = int(row["label"][0]), row["length"]
        reach = (np.arange(32) % length) + 1                   # a window of `length` starts every `length` targets
        model = NGram(train, order, data.vocab_size)
        p = [model.probs(val[s:s + 33], 1, reach) for s in (a, b)]
        assert row["chunk_loss"] == pytest.approx([-np.log(q).mean() for q in p], rel=1e-12)
        assert row["ppl"] == pytest.approx(math.exp(-np.log(np.concatenate(p)).mean()), rel=1e-12)
    assert [r["label"] for r in rows] == ["3-gram", "3-gram", "4-gram", "4-gram", "5-gram", "5-gram"]
    assert rows[4]["ppl"] < rows[2]["ppl"] < rows[0]["ppl"]   # more context, lower perplexity on this text
    assert (tmp_path / "runs" / "ngram.json").exists() and lm_suite.baselines([dict(dir=str(tiny_run))], settings,
                                                                             cfg) == rows
    kept_elsewhere = [dict(dir=str(tmp_path / "no-checkpoint"))]     # every run kept on another machine
    assert lm_suite.baselines(kept_elsewhere, settings, cfg) == rows
    assert lm_suite.baselines(kept_elsewhere, dict(settings, eval_tokens=128), cfg) == []


@pytest.mark.slow
def test_report_marks_runs_worse_than_the_4gram(tmp_path):
    from types import SimpleNamespace
    results = []
    for enc, ppl in [("rope", 4.0), ("none", 9.0)]:
        (tmp_path / enc).mkdir()
        rows = [dict(label=enc, length=16, ppl=ppl), dict(label=enc, length=32, ppl=ppl + 1)]
        results.append(dict(encoding=enc, seed=1, dir=str(tmp_path / enc), rows=rows, command="python train.py"))
    baselines = [dict(label=f"{n}-gram", encoding="ngram", method=f"{n}-gram", mode="nonoverlap", length=L,
                      ppl=ppl + L / 100) for n, ppl in [(3, 8.0), (4, 6.0), (5, 5.0)] for L in (16, 32)]
    settings = dict(report_dir=str(tmp_path / "report"), eval_lengths=[16, 32], seed_list=[1], plots=False,
                    eval_mode="nonoverlap", eval_tokens=64, rope_factor=2.0, finetune_len=0)
    cfg = SimpleNamespace(block_size=16, dataset="tiny", n_layer=1, n_head=2, n_embd=32, max_iters=10, batch_size=1)
    md = open(compare_report.write(results, [], settings, cfg, "python compare.py", baselines)).read()
    table = {line.split(" | ")[0][2:]: line for line in md.splitlines() if line.startswith("| ")}
    assert {"rope", "none †", "3-gram", "4-gram", "5-gram"} <= set(table)   # 9.0 > 6.16 > 4.0; no n-gram marked
    assert table["4-gram"].endswith("| (count model) |  |  |  |  |  | 6.16 | 6.32 |")
    assert "(1 of 2 rows)" in md and "says nothing about extrapolation" in md
    with open(tmp_path / "report" / "runs.csv") as f:
        runs = list(csv.DictReader(f))
    assert [(r["label"], r["encoding"], r["ppl@16"]) for r in runs][2:] == [
        ("3-gram", "ngram", "8.16"), ("4-gram", "ngram", "6.16"), ("5-gram", "ngram", "5.16")]
    with open(tmp_path / "report" / "eval.csv") as f:
        assert sum(r["encoding"] == "ngram" and r["method"] == "4-gram" for r in csv.DictReader(f)) == 2
    plain = open(compare_report.write(results, [], settings, cfg, "python compare.py")).read()
    assert "†" not in plain and "n-gram" not in plain
