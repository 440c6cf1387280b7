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

Intervals that include the seeds (issue 49; the bootstrap above holds the trained models fixed):

- t_interval: Student's t interval of the mean of one value per seed, mean +- t(0.975, n - 1) sd / sqrt(n), the
  quantile computed (t_quantile), not read from a table; the primary interval of a seed-level claim;
- hierarchical_bootstrap: a two-stage percentile bootstrap (Davison & Hinkley 1997, sec. 3.8): resample the seeds
  with replacement, then the evaluation chunks, drawn once per round for every resampled seed (the seeds were scored
  on the same chunks, so the chunk effect is shared); with one seed it is bootstrap() exactly, and it widens with the
  spread between seeds;
- holm / benjamini_hochberg: adjusted p-values across the claims of one report (Holm 1979, family-wise error;
  Benjamini & Hochberg 1995, false discovery rate). measure/published.py uses Holm.
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


# ---- intervals and tests over seeds (issue 49) ----------------------------------------------
def incomplete_beta(a, b, x):
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (DLMF 8.17.22), evaluated
    with the modified Lentz method; the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) keeps x in the fast side."""
    if x <= 0 or x >= 1:
        return float(x >= 1)
    if x > (a + 1) / (a + b + 2):
        return 1 - incomplete_beta(b, a, 1 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    f, c, d, tiny = 1.0, 1.0, 0.0, 1e-300
    for i in range(400):
        m = i // 2
        if i == 0:
            num = 1.0
        elif i % 2 == 0:
            num = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            num = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d = 1 / (1 + num * d if abs(1 + num * d) > tiny else tiny)
        c = 1 + num / c if abs(1 + num / c) > tiny else tiny
        f *= c * d
        if abs(1 - c * d) < 1e-15:
            break
    return front * (f - 1)


def t_cdf(t, df):
    """P(T <= t) for Student's t with df degrees of freedom: 1 - I_x(df / 2, 1 / 2) / 2 at x = df / (df + t^2)."""
    tail = incomplete_beta(df / 2, 0.5, df / (df + t * t)) / 2
    return 1 - tail if t > 0 else tail


def t_quantile(p, df):
    """The p quantile of Student's t (0 < p < 1), by bisection on t_cdf."""
    if not 0 < p < 1 or df <= 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p = {p}, df = {df}")
    if p < 0.5:
        return -t_quantile(1 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def t_interval(values, level=0.95):
    """(mean, lo, hi): Student's t interval of the mean of `values` (one per seed, or per unit); nan bounds with
    fewer than two values."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if len(v) < 2:
        return mean, math.nan, math.nan
    half = t_quantile(1 - (1 - level) / 2, len(v) - 1) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return mean, mean - half, mean + half


def t_test(values, null=0.0):
    """Two-sided p-value of the one-sample t test that the mean of `values` is `null` (nan with fewer than two
    values; 0 when every value is the same and differs from null, 1 when it is null)."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return math.nan
    se = float(v.std(ddof=1)) / math.sqrt(len(v))
    gap = float(v.mean()) - null
    if se == 0:
        return float(gap == 0)
    return 2 * (1 - t_cdf(abs(gap) / se, len(v) - 1))


def hierarchical_bootstrap(values, rounds=2000, seed=0, level=0.95):
    """Percentile interval of the grand mean of values (seeds, units): each round resamples the seeds with
    replacement, then the units (chunks, documents, probe windows), one draw applied to every resampled seed since
    every seed was scored on the same units. The unit draws are bootstrap()'s, so one seed gives its interval."""
    values = np.atleast_2d(np.asarray(values, dtype=float))
    n_seeds, n = values.shape
    units = np.random.default_rng(seed).integers(0, n, size=(rounds, n))                  # (rounds, n)
    seeds = np.random.default_rng([seed, 1]).integers(0, n_seeds, size=(rounds, n_seeds))  # (rounds, n_seeds)
    means = values[seeds[:, :, None], units[:, None, :]].mean(axis=(1, 2))                 # (rounds,)
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


@dataclass
class SeedLevel:
    """A paired difference with its seed-level statistics (seed_level)."""
    values: np.ndarray     # (seeds, units) per-unit differences (units: chunks, documents or probe windows)
    mean: float
    lo: float              # the primary 95% interval
    hi: float
    how: str               # "t over 3 seeds", "t over 16 units (one seed: ...)"
    p: float               # two-sided p of the null, unadjusted (adjust a report's together: holm)
    boot: tuple            # the hierarchical bootstrap's 95% interval


def seed_level(values, null=0.0):
    """SeedLevel of (seeds, units) paired differences: Student's t over the seeds' means (and its test of `null`)
    with two or more seeds, else over the units, saying that the seeds' spread is not in it; the hierarchical
    bootstrap beside it."""
    values = np.atleast_2d(np.asarray(values, dtype=float))
    per = values.mean(1) if len(values) > 1 else values[0]
    unit = "seeds" if len(values) > 1 else "units (one seed: the seeds' spread is not in it)"
    mean, lo, hi = t_interval(per)
    return SeedLevel(values, float(values.mean()), lo, hi, f"t over {len(per)} {unit}", t_test(per, null),
                     hierarchical_bootstrap(values))


def eval_differences(rows_a, rows_b):
    """(seeds, chunks) paired differences of two lists of evaluation rows ({loss, chunk_loss}, one per seed in the
    same order): per chunk where every row has the same number of them, else (seeds, 1) of the losses."""
    counts = {len(r["chunk_loss"]) for r in rows_a + rows_b}
    if len(counts) == 1 and counts.pop() > 0:
        return np.array([np.subtract(a["chunk_loss"], b["chunk_loss"]) for a, b in zip(rows_a, rows_b)])
    return np.array([[a["loss"] - b["loss"]] for a, b in zip(rows_a, rows_b)])


def holm(pvalues):
    """Holm's step-down adjusted p-values, in the input order: the i-th smallest of m is multiplied by
    m - i + 1, then made non-decreasing in that order and capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    m = len(p)
    adjusted = np.maximum.accumulate(np.minimum(1, (m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out.tolist()


def benjamini_hochberg(pvalues):
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order: the i-th smallest of m times m / i,
    made non-increasing from the largest down and capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    m = len(p)
    scaled = np.minimum(1, p[order] * m / np.arange(1, m + 1))
    adjusted = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(m)
    out[order] = adjusted
    return out.tolist()
