"""measure/ngram.py and measure/stats.py against values computed by hand."""
import math

import numpy as np
import pytest

from measure.ngram import NGram
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
    assert not p.is_result                                    # mean - 2 sd < 0 < mean + 2 sd


def test_bootstrap_interval_excludes_zero_only_for_a_consistent_difference():
    lo, hi = bootstrap(np.full((2, 50), 0.3) + np.linspace(-0.01, 0.01, 50))
    assert 0.29 < lo <= hi < 0.31
    rng = np.random.default_rng(1)
    lo, hi = bootstrap(rng.normal(0.0, 1.0, (1, 200)), seed=3)
    assert lo < 0 < hi
    assert paired([1, 1], [0, 0], np.ones((2, 10)), np.zeros((2, 10))).is_result


def test_reciprocal_ranks_share_ties():
    rr = reciprocal_ranks({"a": 0.9, "b": 0.5, "c": 0.5, "d": 0.1})
    assert rr == {"a": 1.0, "b": pytest.approx((1 / 2 + 1 / 3) / 2), "c": pytest.approx((1 / 2 + 1 / 3) / 2),
                  "d": 0.25}
    assert sum(reciprocal_ranks({"x": 0, "y": 0, "z": 0}).values()) == pytest.approx(1 + 1 / 2 + 1 / 3)
