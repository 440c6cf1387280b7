"""addition: two m-bit binary numbers, their (m+1)-bit sum, least significant bit first
(binary addition of Delétang et al. 2023 and Ruoss et al. 2023; LSB first so that the carry
flows in reading order).

    PAD.. a_0 .. a_{m-1} + b_0 .. b_{m-1} SEP | c_0 .. c_m          m = (length - 4) // 3
"""
from tasks.common import SEP, SYM, assemble, check_length, rng, strip_pad

SYMBOLS = 3          # SYM + 0, SYM + 1: bits; SYM + 2: '+'
PLUS = SYM + 2
VOCAB_SIZE = SYM + SYMBOLS
MIN_LENGTH = 7


def bits_of(n, width):
    return [(n >> i) & 1 for i in range(width)]          # LSB first


def value(bits):
    return sum(b << i for i, b in enumerate(bits))


def generate(seed, length) -> "Example":
    check_length("addition", MIN_LENGTH, length)
    r, m = rng(seed), (length - 4) // 3
    a, b = r.getrandbits(m), r.getrandbits(m)
    question = [SYM + x for x in bits_of(a, m)] + [PLUS] + [SYM + x for x in bits_of(b, m)] + [SEP]
    return assemble(length, question, [SYM + x for x in bits_of(a + b, m + 1)])


def reference(ids):
    question = strip_pad(ids[:ids.index(SEP)])
    plus = question.index(PLUS)
    a, b = [t - SYM for t in question[:plus]], [t - SYM for t in question[plus + 1:]]
    return [SYM + x for x in bits_of(value(a) + value(b), len(a) + 1)]
