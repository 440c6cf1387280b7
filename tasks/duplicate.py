"""duplicate: a random string, SEP, the string twice (Delétang et al. 2023; Ruoss et al. 2023).

    PAD.. s_1 .. s_m SEP | s_1 .. s_m s_1 .. s_m          m = (length - 2) // 3 symbols of 16
"""
from tasks.common import SEP, SYM, assemble, check_length, rng, strip_pad

SYMBOLS = 16
VOCAB_SIZE = SYM + SYMBOLS
MIN_LENGTH = 5


def generate(seed, length) -> "Example":
    check_length("duplicate", MIN_LENGTH, length)
    r, m = rng(seed), (length - 2) // 3
    s = [SYM + r.randrange(SYMBOLS) for _ in range(m)]
    return assemble(length, s + [SEP], s + s)


def reference(ids):
    s = strip_pad(ids[:ids.index(SEP)])
    return s + s
