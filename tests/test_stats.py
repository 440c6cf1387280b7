"""measure/stats.py's seed-level statistics against cases worked by hand: Student's t (closed forms at 1 and 2
degrees of freedom), the t interval and test, Holm and Benjamini-Hochberg, the hierarchical bootstrap."""
import math

import numpy as np
import pytest

from measure import stats


def test_t_quantiles_match_the_closed_forms_and_the_table():
    # df = 1 (Cauchy): F(t) = 1/2 + atan(t) / pi; df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t^2)), so t^2 = 2 a^2 / (1 - a^2)
    for p in (0.6, 0.9, 0.975, 0.995):
        assert stats.t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
        a = 2 * p - 1
        assert stats.t_quantile(p, 2) == pytest.approx(math.sqrt(2 * a * a / (1 - a * a)), rel=1e-9)
    assert stats.t_quantile(0.025, 2) == pytest.approx(-4.302653, abs=1e-6)
    for df, t in enumerate(stats.T975, 1):                                   # the printed table, to its 3 decimals
        assert stats.t_quantile(0.975, df) == pytest.approx(t, abs=6e-4)
    assert stats.t_quantile(0.975, 120) == pytest.approx(1.980, abs=5e-4)  # past the table: between 2.042 and 1.960
    assert stats.t_cdf(1.0, 1) == pytest.approx(0.75) and stats.t_cdf(-2.0, 2) == pytest.approx(0.5 - 1 / math.sqrt(6))
    with pytest.raises(ValueError, match="0 < p < 1"):
        stats.t_quantile(1.0, 3)


def test_t_interval_and_test_of_three_values_by_hand():
    # 1, 2, 3: mean 2, sd 1; t(0.975, 2) = sqrt(2 x 0.95^2 / (1 - 0.95^2)) = 4.30265
    half = math.sqrt(2 * 0.95 ** 2 / (1 - 0.95 ** 2)) / math.sqrt(3)
    mean, lo, hi = stats.t_interval([1, 2, 3])
    assert (mean, lo, hi) == pytest.approx((2, 2 - half, 2 + half))
    # t = 2 / (1 / sqrt 3) = 2 sqrt 3; p = 2 (1 - F(t)) = 1 - t / sqrt(2 + t^2) at df = 2
    t = 2 * math.sqrt(3)
    assert stats.t_test([1, 2, 3]) == pytest.approx(1 - t / math.sqrt(2 + t * t))
    assert stats.t_test([1, 2, 3], null=2) == pytest.approx(1.0)
    assert math.isnan(stats.t_interval([5.0])[1]) and math.isnan(stats.t_test([5.0]))
    assert stats.t_test([0.1, 0.1, 0.1]) == 0 and stats.t_test([0.0, 0.0]) == 1


def test_holm_and_benjamini_hochberg_on_a_list_worked_by_hand():
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04; Holm: x4, x3, x2, x1 = 0.02, 0.03, 0.06, 0.04; running max 0.02, 0.03, 0.06, 0.06
    assert stats.holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: x 4/1, 4/2, 4/3, 4/4 = 0.02, 0.02, 0.04, 0.04 -> running min from the top: the same
    assert stats.benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert stats.holm([0.5, 0.9]) == [1.0, 1.0] and stats.benjamini_hochberg([0.5, 0.9]) == [0.9, 0.9]
    assert sum(q < 0.05 for q in stats.holm(p)) == 2 < sum(q < 0.05 for q in stats.benjamini_hochberg(p)) == 4


def test_the_hierarchical_bootstrap_is_the_chunk_bootstrap_with_one_seed_and_widens_with_seed_spread():
    chunks = np.random.default_rng(0).normal(0, 1, (1, 16))
    assert stats.hierarchical_bootstrap(chunks, seed=5) == stats.bootstrap(chunks, seed=5)
    same = np.repeat(chunks, 3, axis=0)                                       # three seeds that agree exactly
    assert stats.hierarchical_bootstrap(same, seed=5) == pytest.approx(stats.bootstrap(chunks, seed=5))
    lo, hi = stats.hierarchical_bootstrap(same, seed=5)
    spread = same + np.array([[-0.5], [0.0], [0.5]])                          # the seeds differ by a constant each
    wide_lo, wide_hi = stats.hierarchical_bootstrap(spread, seed=5)
    assert wide_hi - wide_lo > hi - lo + 0.3
    assert stats.bootstrap(spread, seed=5) == pytest.approx((lo, hi))         # the chunk bootstrap cannot see it
    # two seeds, one chunk each, values 0 and 1: a round's mean is 0, 1/2 or 1 with chances 1/4, 1/2, 1/4
    assert stats.hierarchical_bootstrap([[0.0], [1.0]], rounds=4000) == (0.0, 1.0)


def test_seed_level_is_t_over_the_seeds_means_and_eval_differences_pair_by_chunk():
    rows = lambda losses, chunks: [dict(loss=x, chunk_loss=c) for x, c in zip(losses, chunks)]  # noqa: E731
    a = rows([1.2, 1.3, 1.4], [[1.1, 1.3], [1.2, 1.4], [1.3, 1.5]])
    b = rows([1.0, 1.0, 1.0], [[1.0, 1.0]] * 3)
    values = stats.eval_differences(a, b)
    np.testing.assert_allclose(values, [[0.1, 0.3], [0.2, 0.4], [0.3, 0.5]])
    s = stats.seed_level(values)                                  # seed means 0.2, 0.3, 0.4: mean 0.3, sd 0.1
    half = stats.t_quantile(0.975, 2) * 0.1 / math.sqrt(3)
    assert (s.mean, s.lo, s.hi) == pytest.approx((0.3, 0.3 - half, 0.3 + half), rel=1e-9)
    assert s.how == "t over 3 seeds" and s.p == pytest.approx(stats.t_test([0.2, 0.3, 0.4]))
    no_chunks = stats.eval_differences(rows([1.2, 1.3], [[], []]), rows([1.0, 1.0], [[], []]))
    np.testing.assert_allclose(no_chunks, [[0.2], [0.3]])
    one = stats.seed_level(values[:1])                            # one seed: t over its chunks 0.1, 0.3
    assert one.how.startswith("t over 2 units (one seed") and one.mean == pytest.approx(0.2)
