"""passkey: a key of 4 digits hidden at a chosen depth in repeating filler, asked for at the end
(Mohtashami & Jaggi 2023, https://arxiv.org/abs/2305.16300; the retrieval test of PI, YaRN,
LongLoRA, PoSE and LongRoPE).

    PAD F0 F1 F2 F3 F0 .. SEP k_1 .. k_4 .. F1 F2 QRY | k_1 .. k_4
    filler f = length - 11 tokens (a fixed cycle of 4), round(depth * f) of them before the key;
    depth is uniform in [0, 1] unless given. The key's distance is QRY's position - SEP's.
    spread (bin edges in tokens): the copy distance (copy_distances) drawn to cover those bins evenly instead.
"""
from tasks.common import QRY, SEP, SYM, assemble, check_length, draw_distance, rng

DIGITS, KEY_LEN, FILLER = 10, 4, 4   # digits SYM..SYM+9, filler cycle SYM+10..SYM+13
VOCAB_SIZE = SYM + DIGITS + FILLER
MIN_LENGTH = 2 * KEY_LEN + 3


def filler(start, n):
    return [SYM + DIGITS + (start + i) % FILLER for i in range(n)]


def generate(seed, length, depth=None, spread=None) -> "Example":
    check_length("passkey", MIN_LENGTH, length)
    if depth is not None and not 0.0 <= depth <= 1.0:
        raise ValueError(f"passkey depth must be in [0, 1] (0: the key first), got {depth!r}")
    if depth is not None and spread is not None:
        raise ValueError("passkey takes a depth or a spread of distances, not both")
    r = rng(seed)
    f = length - MIN_LENGTH
    if spread is None:
        before = round((r.random() if depth is None else depth) * f)
    else:   # copy distance c = f + KEY_LEN - before, from KEY_LEN (the key last) to f + KEY_LEN (first)
        before = f + KEY_LEN - draw_distance(r, spread, KEY_LEN, f + KEY_LEN)
    key = [SYM + r.randrange(DIGITS) for _ in range(KEY_LEN)]
    question = filler(0, before) + [SEP] + key + filler(before, f - before) + [QRY]
    return assemble(length, question, key)


def reference(ids):
    """The digits after the key marker."""
    i = ids.index(SEP)
    return ids[i + 1:i + 1 + KEY_LEN]


def distance(ids):
    """Tokens from the key marker to the question: how far back the key must be fetched."""
    return ids.index(QRY) - ids.index(SEP)


def copy_distances(ids):
    """One distance per answer: tokens from each key digit to the token that predicts its copy (QRY and the
    answer digits before it: QRY - SEP - 1 for every digit). A model that attends to its last w tokens, itself
    included, can read the key iff the distance is < w."""
    return [ids.index(QRY) - ids.index(SEP) - 1]

