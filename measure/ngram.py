"""Count n-gram baselines: what a model of the last n - 1 tokens alone scores on the same targets.

Interpolated absolute discounting (Ney, Essen & Kneser 1994; the "interpolated" form of Chen &
Goodman 1998, eq. 12), with discount d for every order:

    P_n(w | h) = max(c(h w) - d, 0) / c(h .)  +  d N1+(h .) / c(h .)  P_{n-1}(w | h')

h the last n - 1 tokens, h' the last n - 2, c(h .) how often h is followed by any token in the
training split, N1+(h .) how many distinct tokens follow it. A history never seen (c(h .) = 0)
gives P_{n-1}(w | h'). The recursion ends at the unigram, itself discounted towards the uniform
1 / V, so every token of the vocabulary has a non-zero probability. Near the start of the
evaluated tokens a history is as long as the tokens before it allow.

Counts are kept as sorted arrays of n-gram ids (tokens read as digits in base V), so a 5-gram
model of 4.5M characters is fitted in seconds with numpy and no Python loop over tokens.
"""
import math

import numpy as np

D = 0.75   # the discount of Chen & Goodman's experiments


def _ids(tokens, n, V):
    """(len - n + 1,) int64 ids of the n-grams of tokens, in base V."""
    ids = np.zeros(len(tokens) - n + 1, dtype=np.int64)
    for i in range(n):
        ids = ids * V + tokens[i:len(tokens) - n + 1 + i]
    return ids


class NGram:
    """An order-n model fitted on `train` (1-D int array), vocabulary size V."""

    def __init__(self, train, n, V, d=D):
        if V ** n >= 2 ** 62:
            raise ValueError(f"a {n}-gram over {V} tokens does not fit int64 ids; use a smaller n")
        train = np.asarray(train, dtype=np.int64)
        self.n, self.V, self.d = n, V, d
        self.grams, self.counts = [], []            # per order k = 1..n: sorted ids and their counts
        self.hist, self.hist_count, self.hist_types = [], [], []   # per order: histories (k - 1 tokens)
        for k in range(1, n + 1):
            g, c = np.unique(_ids(train, k, V), return_counts=True)
            h, first = np.unique(g // V, return_index=True)                 # history = all but the last token
            self.grams.append(g), self.counts.append(c)
            self.hist.append(h)
            self.hist_count.append(np.add.reduceat(c, first))               # c(h .)
            self.hist_types.append(np.diff(np.append(first, len(g))))       # N1+(h .)

    @staticmethod
    def _lookup(keys, table, values):
        i = np.minimum(np.searchsorted(table, keys), len(table) - 1)
        return np.where(table[i] == keys, values[i], 0)

    def probs(self, tokens, start):
        """P(tokens[t] | up to n - 1 tokens before it) for t = start .. len - 1 (float64)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        t = np.arange(start, len(tokens))
        p = np.full(len(t), 1.0 / self.V)
        for k in range(1, self.n + 1):
            ok = t >= k - 1                                  # a history of k - 1 tokens exists
            gram = np.zeros(len(t), dtype=np.int64)
            for j in range(k):                               # ids of tokens[t - k + 1 .. t]
                gram = gram * self.V + tokens[np.maximum(t - k + 1 + j, 0)]
            c = self._lookup(gram, self.grams[k - 1], self.counts[k - 1])
            ch = self._lookup(gram // self.V, self.hist[k - 1], self.hist_count[k - 1])
            nh = self._lookup(gram // self.V, self.hist[k - 1], self.hist_types[k - 1])
            seen = ok & (ch > 0)
            safe = np.maximum(ch, 1)
            p = np.where(seen, np.maximum(c - self.d, 0) / safe + self.d * nh / safe * p, p)
        return p

    def perplexity(self, tokens, start=1):
        """exp of the mean negative log-probability of tokens[start:], each given what precedes it."""
        return math.exp(-np.log(self.probs(tokens, start)).mean())
