"""Paired statistics for comparing two encodings or methods run with the same seeds on the same tokens.

A difference is reported as a result only when its interval excludes zero:

- over seeds: the per-seed differences a_s - b_s (seeds paired: the same seed trains both on
  the same batches), their mean, their sample standard deviation, and in how many seeds the sign
  agrees with the mean's;
- over evaluation documents (or windows): a percentile bootstrap of the mean paired difference,
  resampling documents with replacement (Efron & Tibshirani 1993, ch. 13), seeded so that a
  report is reproducible.
"""
import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Paired:
    mean: float          # mean of a - b over seeds
    sd: float            # sample standard deviation of the differences (nan with one seed)
    agree: int           # seeds whose difference has the sign of the mean
    n: int               # seeds
    lo: float = math.nan  # bootstrap interval of the mean difference over documents
    hi: float = math.nan

    @property
    def is_result(self):
        """True when the interval (bootstrap if there is one, else mean +- 2 sd over seeds) excludes 0."""
        lo, hi = (self.lo, self.hi) if not math.isnan(self.lo) else (self.mean - 2 * self.sd, self.mean + 2 * self.sd)
        return not math.isnan(lo) and (lo > 0 or hi < 0)

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
