"""Paired statistics for comparing two encodings or methods run with the same seeds on the same tokens.

A difference is reported as a result only when its interval excludes zero and, with more than one seed, every
seed's difference has the mean's sign (the bootstrap over documents holds the seeds fixed, so it cannot see a
seed that disagrees):

- over seeds: the per-seed differences a_s - b_s (seeds paired: the same seed trains both on
  the same batches), their mean, their sample standard deviation, in how many seeds the sign
  agrees with the mean's, and Student's t interval of the mean, mean +- t(0.975, n - 1) sd / sqrt(n)
  (the paired t-test's interval; with 3 seeds t = 4.303, i.e. mean +- 2.48 sd);
- over evaluation documents (or windows): a percentile bootstrap of the mean paired difference,
  resampling documents with replacement (Efron & Tibshirani 1993, ch. 13), seeded so that a
  report is reproducible.
"""
import math
from dataclasses import dataclass

import numpy as np

# Student's t, 0.975 quantile, for 1 .. 30 degrees of freedom (any table of the t distribution,
# e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2); past 30 the value at 30 (wider than the normal's 1.96).
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


@dataclass
class Paired:
    mean: float          # mean of a - b over seeds
    sd: float            # sample standard deviation of the differences (nan with one seed)
    agree: int           # seeds whose difference has the sign of the mean
    n: int               # seeds
    lo: float = math.nan  # bootstrap interval of the mean difference over documents
    hi: float = math.nan

    def interval(self):
        """The 95% interval of the mean difference: the bootstrap over documents if there is one, else
        Student's t over seeds (nan with one seed)."""
        if not math.isnan(self.lo):
            return self.lo, self.hi
        half = T975[min(self.n - 1, len(T975)) - 1] * self.sd / math.sqrt(self.n) if self.n > 1 else math.nan
        return self.mean - half, self.mean + half

    @property
    def is_result(self):
        """True when the interval excludes 0 and every seed agrees in sign."""
        lo, hi = self.interval()
        return not math.isnan(lo) and (lo > 0 or hi < 0) and self.agree == self.n

    def __str__(self):
        sd = "" if math.isnan(self.sd) else f" ± {self.sd:.3g}"
        ci = "" if math.isnan(self.lo) else f", 95% [{self.lo:.3g}, {self.hi:.3g}]"
        return f"{self.mean:+.3g}{sd} ({self.agree}/{self.n} seeds{ci})"


def paired(a, b, per_doc_a=None, per_doc_b=None, rounds=2000, seed=0):
    """a, b: one number per seed (same seeds, same order). per_doc_a/b: optional (seeds, documents)
    arrays of per-document values for the bootstrap over documents."""
    diff = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if diff.ndim != 1 or len(diff) == 0:
        raise ValueError("paired() needs one value per seed for both sides, in the same seed order")
    mean = float(diff.mean())
    sd = float(diff.std(ddof=1)) if len(diff) > 1 else math.nan
    agree = int((np.sign(diff) == np.sign(mean)).sum()) if mean != 0 else 0
    out = Paired(mean, sd, agree, len(diff))
    if per_doc_a is not None:
        out.lo, out.hi = bootstrap(np.asarray(per_doc_a, float) - np.asarray(per_doc_b, float), rounds, seed)
    return out


def paired_evals(rows_a, rows_b):
    """paired() of two lists of evaluation rows ({loss, chunk_loss}), one per seed in the same order: the bootstrap
    over the chunks where every row has the same number of them (more than one), else none (Student's t)."""
    chunked = len({len(r["chunk_loss"]) for r in rows_a + rows_b}) == 1 and len(rows_a[0]["chunk_loss"]) > 1
    return paired([r["loss"] for r in rows_a], [r["loss"] for r in rows_b],
                  *([[r["chunk_loss"] for r in rows_a], [r["chunk_loss"] for r in rows_b]] if chunked else []))


def bootstrap(doc_diff, rounds=2000, seed=0, level=0.95):
    """Percentile interval of the mean over seeds and documents of doc_diff (seeds, documents),
    resampling documents (the same draw for every seed, since the seeds saw the same documents)."""
    doc_diff = np.atleast_2d(doc_diff)
    n = doc_diff.shape[1]
    draws = np.random.default_rng(seed).integers(0, n, size=(rounds, n))         # (rounds, n) document indices
    means = doc_diff[:, draws].mean(axis=(0, 2))                                   # (rounds,)
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


def reciprocal_ranks(scores):
    """{name: score} (higher is better) -> {name: reciprocal rank}; names tied at ranks r..r+k-1
    share the mean of 1/r .. 1/(r+k-1), so ties neither win nor lose rank mass (the sum stays that
    of 1/1 .. 1/n)."""
    order = sorted(scores.values(), reverse=True)
    share = {}
    for v in set(order):
        r, k = order.index(v) + 1, order.count(v)
        share[v] = sum(1 / i for i in range(r, r + k)) / k
    return {name: share[v] for name, v in scores.items()}
