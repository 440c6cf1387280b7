"""addition: two m-bit binary numbers, their (m+1)-bit sum, least significant bit first
(binary addition of Delétang et al. 2023 and Ruoss et al. 2023; LSB first so that the carry
flows in reading order).

    PAD.. a_0 .. a_{m-1} + b_0 .. b_{m-1} SEP | c_0 .. c_m          m = (length - 4) // 3
    places  0 ..  1  ..   m    0  1  ..   m    0    1  .. m+1         (places(): 1 + the bit's significance)
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


def places(ids):
    """Each token's place in its number, for the encodings that read it (positional/abacus.py, coupling.py):
    1 + the bit's significance in a, b and the sum (a_i, b_i and c_i share i + 1), 0 for PAD, '+' and SEP.
    Read from the question alone, as reference() is: the answer's slots have theirs whatever fills them (a
    prefix, a wrong answer, a batch's right padding)."""
    sep = ids.index(SEP)
    question = strip_pad(ids[:sep])               # a_0 .. a_{m-1} + b_0 .. b_{m-1}
    m, start = (len(question) - 1) // 2, sep - len(question)
    operands = [j + 1 for j in range(m)] + [0] + [j + 1 for j in range(m)]
    answer = [t + 1 if t <= m else 0 for t in range(len(ids) - sep - 1)]
    return [0] * start + operands + [0] + answer
