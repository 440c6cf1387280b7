"""reverse: a random string, SEP, the string reversed (Delétang et al. 2023; Ruoss et al. 2023).

    PAD.. s_1 .. s_m SEP | s_m .. s_1          m = (length - 2) // 2 symbols of 16
"""
from tasks.common import SEP, SYM, assemble, check_length, rng, strip_pad

SYMBOLS = 16
VOCAB_SIZE = SYM + SYMBOLS
MIN_LENGTH = 4


def generate(seed, length) -> "Example":
    check_length("reverse", MIN_LENGTH, length)
    r, m = rng(seed), (length - 2) // 2
    s = [SYM + r.randrange(SYMBOLS) for _ in range(m)]
    return assemble(length, s + [SEP], s[::-1])


def reference(ids):
    return strip_pad(ids[:ids.index(SEP)])[::-1]
