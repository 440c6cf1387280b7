"""grid: a 2-D lookup: copy the row below the marker row of a grid read row by row (for 2-D
RoPE, positional/rope_2d.py; the comparison of issue #26 is in docs/tasks.md).

    PAD..                   k >= 1 PADs: what the rows leave over (PAD first, as every task)
    PAD s s s s s           R rows of W tokens: a border (PAD), then W - 1 symbols of 16
    PAD Q Q Q Q Q           one row, not the last, is the marker row: QRY in every cell
    PAD s s s s s           the row below it is the one to copy
    SEP | s s s s s         the answer row: SEP as its border, then that row's symbols

W = 6 while the length is below 4 W^2 and doubles each time it reaches it (12 from 144 tokens,
24 from 576); R = (length - 1 - W) // W, so longer sequences are taller, then wider, grids.
Each answer symbol is in the column of its source, which is right below a QRY: in 1-D a distance
of W to the marker and of a multiple of W to the answer; for 2-D RoPE with grid_width = W,
a column offset of 0 both times. The k PADs shift every row by k positions, so a cell's encoded
row may carry over by one, the same for a whole column: differences within a column stay exact.
"""
from tasks.common import PAD, QRY, SEP, SYM, assemble, check_length, rng

SYMBOLS = 16
VOCAB_SIZE = SYM + SYMBOLS
WIDTH = 6                             # the columns of the shortest grids (the border included)
MIN_LENGTH = 3 * WIDTH + 1            # a PAD, the marker row, the row below it, the answer row


def width(length):
    """The grid's columns at this length: WIDTH, doubled each time the length reaches 4 W^2."""
    w = WIDTH
    while length >= 4 * w * w:
        w *= 2
    return w


def generate(seed, length) -> "Example":
    check_length("grid", MIN_LENGTH, length)
    r, w = rng(seed), width(length)
    rows = [[PAD] + [SYM + r.randrange(SYMBOLS) for _ in range(w - 1)] for _ in range((length - 1 - w) // w)]
    marker = r.randrange(len(rows) - 1)
    rows[marker][1:] = [QRY] * (w - 1)
    return assemble(length, [t for row in rows for t in row] + [SEP], rows[marker + 1][1:])


def reference(ids):
    """The row below the marker row: W - 1 symbols, one row (W tokens) after the first QRY."""
    i = ids.index(QRY)
    w = next(j for j in range(i, len(ids)) if ids[j] != QRY) - i + 1
    return ids[i + w:i + 2 * w - 1]
