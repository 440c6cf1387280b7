"""passkey: a key of 4 digits hidden at a chosen depth in repeating filler, asked for at the end
(Mohtashami & Jaggi 2023, https://arxiv.org/abs/2305.16300; the retrieval test of PI, YaRN,
LongLoRA, PoSE and LongRoPE).

    PAD F0 F1 F2 F3 F0 .. SEP k_1 .. k_4 .. F1 F2 QRY | k_1 .. k_4
    filler f = length - 11 tokens (a fixed cycle of 4), round(depth * f) of them before the key;
    depth is uniform in [0, 1] unless given. The key's distance is QRY's position - SEP's.
"""
from tasks.common import QRY, SEP, SYM, assemble, check_length, rng

DIGITS, KEY_LEN, FILLER = 10, 4, 4   # digits SYM..SYM+9, filler cycle SYM+10..SYM+13
VOCAB_SIZE = SYM + DIGITS + FILLER
MIN_LENGTH = 2 * KEY_LEN + 3


def filler(start, n):
    return [SYM + DIGITS + (start + i) % FILLER for i in range(n)]


def generate(seed, length, depth=None) -> "Example":
    check_length("passkey", MIN_LENGTH, length)
    if depth is not None and not 0.0 <= depth <= 1.0:
        raise ValueError(f"passkey depth must be in [0, 1] (0: the key first), got {depth!r}")
    r = rng(seed)
    f = length - MIN_LENGTH
    before = round((r.random() if depth is None else depth) * f)
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
