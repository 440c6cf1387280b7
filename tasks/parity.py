"""parity: random bits, SEP, whether the number of ones is odd (Delétang et al. 2023; Ruoss et al. 2023).

    PAD b_1 .. b_m SEP | p          m = length - 3 bits, p = (b_1 + .. + b_m) mod 2
"""
from tasks.common import SEP, SYM, assemble, check_length, rng, strip_pad

SYMBOLS = 2          # SYM + 0 and SYM + 1 are the bits 0 and 1
VOCAB_SIZE = SYM + SYMBOLS
MIN_LENGTH = 4


def generate(seed, length) -> "Example":
    check_length("parity", MIN_LENGTH, length)
    r = rng(seed)
    bits = [r.randrange(2) for _ in range(length - 3)]
    return assemble(length, [SYM + b for b in bits] + [SEP], [SYM + sum(bits) % 2])


def reference(ids):
    bits = [t - SYM for t in strip_pad(ids[:ids.index(SEP)])]
    return [SYM + sum(bits) % 2]
