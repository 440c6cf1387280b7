"""Count n-gram baselines: what a model of the last n - 1 tokens alone scores on the same targets.

Interpolated absolute discounting (Ney, Essen & Kneser 1994; the "interpolated" form of Chen &
Goodman 1998, eq. 12), with discount d for every order:

    P_n(w | h) = max(c(h w) - d, 0) / c(h .)  +  d N1+(h .) / c(h .)  P_{n-1}(w | h')

h the last n - 1 tokens, h' the last n - 2, c(h .) how often h is followed by any token in the
training split, N1+(h .) how many distinct tokens follow it. A history never seen (c(h .) = 0)
gives P_{n-1}(w | h'). The recursion ends at the unigram, itself discounted towards the uniform
1 / V, so every token of the vocabulary has a non-zero probability. A history is as long as the
tokens before the target allow, or shorter where `reach` says so (an evaluation window's start).

Counts are kept as sorted arrays of n-gram ids: a k-gram's id is the rank of its first k - 1
tokens among the training (k - 1)-grams, times V, plus its last token, so ids stay below
(training tokens) x V for any order and vocabulary, and a 5-gram model of 1M tokens is fitted
in seconds with numpy and no Python loop over tokens.
"""
import hashlib
import math

import numpy as np

from data.tokenizer import bits_per_byte
from measure.evaluation import chunk_starts, eval_text, spans, validation_tokens

D = 0.75             # the discount of Chen & Goodman's experiments
ORDERS = (3, 4, 5)   # the baselines of every report


def _find(keys, table):
    """Index of each key in the sorted table, -1 where it is absent."""
    if not len(table):
        return np.full(len(keys), -1, dtype=np.int64)
    i = np.minimum(np.searchsorted(table, keys), len(table) - 1)
    return np.where(table[i] == keys, i, -1)


class NGram:
    """An order-n model fitted on `train` (1-D int array), vocabulary size V."""

    def __init__(self, train, n, V, d=D):
        train = np.asarray(train, dtype=np.int64)
        self.n, self.V, self.d = n, V, d
        self.grams, self.counts = [], []            # per order k = 1..n: sorted ids and their counts
        self.hist_count, self.hist_types = [], []   # per order and id: c(h .) and N1+(h .) of its history
        rank = np.zeros(len(train), dtype=np.int64)   # rank of the (k - 1)-gram ending at each position
        for k in range(1, n + 1):
            ids = rank[k - 2:-1] * V + train[k - 1:] if k > 1 else train
            g, inverse, c = np.unique(ids, return_inverse=True, return_counts=True)
            h, first, per_h = np.unique(g // V, return_index=True, return_counts=True)   # history: all but the last
            self.grams.append(g), self.counts.append(c)
            self.hist_count.append(np.repeat(np.add.reduceat(c, first), per_h))          # c(h .)
            self.hist_types.append(np.repeat(per_h, per_h))                              # N1+(h .)
            rank = np.concatenate([np.full(k - 1, -1), inverse.ravel()])

    def probs(self, tokens, start=1, reach=None):
        """P(tokens[t] | up to n - 1 tokens before it) for t = start .. len - 1 (float64); reach: per
        target, the most tokens before it the history may use (default: all)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        t = np.arange(start, len(tokens))
        reach = t if reach is None else np.asarray(reach)
        p = np.full(len(t), 1.0 / self.V)
        rank = np.zeros(len(tokens), dtype=np.int64)   # rank of the (k - 1)-gram ending at each position, -1: unseen
        for k in range(1, self.n + 1):
            prefix = rank[t - 1] if k > 1 else np.zeros(len(t), dtype=np.int64)
            i = _find(np.where(prefix >= 0, prefix * self.V + tokens[t], -1), self.grams[k - 1])
            j = _find(prefix, self.grams[k - 1] // self.V)      # any k-gram with this history
            c = np.where(i >= 0, self.counts[k - 1][i], 0)
            ch, nh = self.hist_count[k - 1][j], self.hist_types[k - 1][j]
            seen = (reach >= k - 1) & (prefix >= 0) & (j >= 0)
            p = np.where(seen, np.maximum(c - self.d, 0) / ch + self.d * nh / ch * p, p)
            if k < self.n:   # the k-grams ending at each position, for the next order's histories
                prev = np.concatenate([[-1], rank[:-1]]) if k > 1 else np.zeros(len(tokens), dtype=np.int64)
                rank = _find(np.where(prev >= 0, prev * self.V + tokens, -1), self.grams[k - 1])
        return p

    def perplexity(self, tokens, start=1):
        """exp of the mean negative log-probability of tokens[start:], each given what precedes it."""
        return math.exp(-np.log(self.probs(tokens, start)).mean())


def window_reach(n, length, stride):
    """(n,) for the targets tokens[1 .. n] of evaluation.spans(n, length, stride): how many tokens of
    its window precede each, the context a model evaluated there sees."""
    reach = np.zeros(n, dtype=np.int64)
    for start, offset in spans(n, length, stride):
        reach[start + offset:start + length] = np.arange(offset + 1, length + 1)
    return reach


def fingerprint(*arrays):
    """A short hash of token arrays: the cache key of what was fitted and scored."""
    h = hashlib.sha1()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def checkpoint_data(ckpt, data_dir=None, path=""):
    """(training split, evaluated tokens, V, bytes of each id, document offsets or None) of a checkpoint:
    its dataset's train split and vocabulary, and what evaluation.evaluate_checkpoint scores (eval_text's)."""
    tokens, docs, byte_lengths, _ = eval_text(ckpt, data_dir, path)
    train, data = validation_tokens(ckpt, data_dir, "train")
    return train, tokens, data.vocab_size or int(max(train.max(), tokens.max())) + 1, byte_lengths, docs


def baseline_rows(train, tokens, V, byte_lengths, docs, lengths, tokens_per_point, mode="nonoverlap", stride=None,
                  orders=ORDERS, d=D):
    """evaluation.COLUMNS rows (label "<n>-gram", encoding "ngram", with chunk_loss) of each order fitted on
    `train`, scored on exactly the targets evaluation.evaluate_checkpoint scores in `tokens` at each length
    (its chunks, not per document), the history of each cut at its window's start as the model's context
    is. byte_lengths: bytes of each id, or None; docs: the documents' offsets in `tokens`, or None."""
    size = max(lengths)
    chunks = [np.asarray(tokens[a:a + size + 1], dtype=np.int64) for a in chunk_starts(len(tokens), size,
                                                                                       tokens_per_point, docs)]
    n = len(chunks) * size
    bpt = float(sum(byte_lengths[c[1:]].sum() for c in chunks)) / n if byte_lengths is not None else None
    rows = []
    for order in orders:
        model = NGram(train, order, V, d)
        for length in sorted(set(lengths)):
            reach = window_reach(size, length, length if mode == "nonoverlap" else (stride or max(1, length // 2)))
            chunk_loss = [float(-np.log(model.probs(c, 1, reach)).mean()) for c in chunks]
            loss = float(np.mean(chunk_loss))
            rows.append(dict(out_dir="count model", encoding="ngram", method=f"{order}-gram", mode=mode,
                             length=length, tokens=n, loss=loss, ppl=math.exp(loss),
                             bpb=bits_per_byte(loss, bpt) or math.nan, docs=None, label=f"{order}-gram",
                             chunk_loss=chunk_loss))
    return rows
