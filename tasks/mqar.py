"""mqar: multi-query associative recall (Arora et al. 2023, Zoology, https://arxiv.org/abs/2312.04927):
key-value pairs, then keys whose values are to be recalled, each answer right after its query.

    PAD.. k_1 v_1 .. k_p v_p SEP q_1 | a_1 q_2 | a_2 .. q_r | a_r
    p = min(32, (length - 2) // 4) pairs of distinct keys (32 keys, 32 values);
    r = (length - 2 - 2p) // 2 queries, each a key of the pairs (uniform, with repeats).
"""
from tasks.common import PAD, SEP, SYM, Example, check_length, rng

KEYS, VALUES = 32, 32                 # keys SYM..SYM+31, values SYM+32..SYM+63
VOCAB_SIZE = SYM + KEYS + VALUES
MIN_LENGTH = 6


def generate(seed, length) -> Example:
    check_length("mqar", MIN_LENGTH, length)
    r = rng(seed)
    p = min(KEYS, max(1, (length - 2) // 4))   # pairs, then queries
    q = (length - 2 - 2 * p) // 2
    keys = [SYM + k for k in r.sample(range(KEYS), p)]
    table = {k: SYM + KEYS + r.randrange(VALUES) for k in keys}
    pairs = [t for k in keys for t in (k, table[k])]
    queries = [r.choice(keys) for _ in range(q)]
    pad = length - 1 - len(pairs) - 2 * q
    ids = [PAD] * pad + pairs + [SEP] + [t for k in queries for t in (k, table[k])]
    mask = [False] * (pad + len(pairs) + 1) + [False, True] * q
    return Example(ids, mask)


def reference(ids):
    """The values of the queries present in ids (all of them for a whole sequence)."""
    sep = ids.index(SEP)
    body = [t for t in ids[:sep] if t != PAD]
    table = dict(zip(body[0::2], body[1::2]))
    return [table[k] for k in ids[sep + 1::2]]
