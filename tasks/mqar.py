"""mqar: multi-query associative recall (Arora et al. 2023, Zoology, https://arxiv.org/abs/2312.04927):
key-value pairs, then keys whose values are to be recalled, each answer right after its query.

    PAD.. k_1 v_1 .. k_p v_p SEP q_1 | a_1 q_2 | a_2 .. q_r | a_r
    p = min(32, (length - 2) // 4) pairs of distinct keys (32 keys, 32 values);
    r = (length - 2 - 2p) // 2 queries, each a key of the pairs (uniform, with repeats).
    spread (bin edges in tokens): each query's key chosen so that its copy distance (copy_distances) covers those
    bins as evenly as the layout allows instead: the key whose distance is nearest a target drawn evenly over the
    bins the query can reach (the pairs stay at the start, so a late query cannot have a short distance unless its
    key was asked shortly before).
"""
from tasks.common import PAD, SEP, SYM, Example, check_length, draw_distance, rng

KEYS, VALUES = 32, 32                 # keys SYM..SYM+31, values SYM+32..SYM+63
VOCAB_SIZE = SYM + KEYS + VALUES
MIN_LENGTH = 6


def generate(seed, length, spread=None) -> Example:
    check_length("mqar", MIN_LENGTH, length)
    r = rng(seed)
    p = min(KEYS, max(1, (length - 2) // 4))   # pairs, then queries
    q = (length - 2 - 2 * p) // 2
    keys = [SYM + k for k in r.sample(range(KEYS), p)]
    table = {k: SYM + KEYS + r.randrange(VALUES) for k in keys}
    pairs = [t for k in keys for t in (k, table[k])]
    pad = length - 1 - len(pairs) - 2 * q
    queries = [r.choice(keys) for _ in range(q)] if spread is None else spread_queries(r, keys, pad, q, spread)
    ids = [PAD] * pad + pairs + [SEP] + [t for k in queries for t in (k, table[k])]
    mask = [False] * (pad + len(pairs) + 1) + [False, True] * q
    return Example(ids, mask)


def reference(ids):
    """The values of the queries present in ids (all of them for a whole sequence)."""
    sep = ids.index(SEP)
    body = [t for t in ids[:sep] if t != PAD]
    table = dict(zip(body[0::2], body[1::2]))
    return [table[k] for k in ids[sep + 1::2]]


def spread_queries(r, keys, pad, q, edges):
    """q query keys, each the key whose copy distance (from the latest occurrence of the key) is nearest a target
    drawn by draw_distance over the bins `edges` (ties broken at random)."""
    last = {k: pad + 2 * i for i, k in enumerate(keys)}   # the latest position of each key token
    out, at = [], pad + 2 * len(keys) + 1                 # at: the position of the next query's key token
    for _ in range(q):
        target = draw_distance(r, edges, 1, at - pad - 1)
        k = min(keys, key=lambda k: (abs(at - last[k] - 1 - target), r.random()))
        out.append(k)
        last[k], at = at, at + 2
    return out


def copy_distances(ids):
    """One distance per answer: tokens from the value to copy (the one after the latest earlier occurrence of the
    query's key, in the pairs or an earlier query) to the query's key token that predicts the answer. A model that
    attends to its last w tokens, itself included, can read it iff the distance is < w."""
    sep, last, out = ids.index(SEP), {}, []
    for i, t in enumerate(ids):
        if i > sep and (i - sep) % 2 == 1:   # a query's key token
            out.append(i - last[t] - 1)
        if SYM <= t < SYM + KEYS:
            last[t] = i
    return out

