"""grid: a 2-D lookup: copy the marked row of a grid read row by row (for 2-D RoPE,
positional/rope_2d.py; the comparison of issue #26 is in docs/tasks.md).

    PAD..                   k >= 1 PADs: what the rows leave over (PAD first, as every task)
    PAD s s s s s s s       R rows of W tokens: a border (PAD), then W - 1 symbols of 16
    QRY s s s s s s s       one row is marked: QRY as its border
    PAD s s s s s s s
    SEP | s s s s s s s     the answer row: SEP as its border, then the marked row's symbols

W = 8 while the length is below 4 W^2 and doubles each time it reaches it (16 from 256 tokens,
32 from 1024); R = (length - 1 - W) // W, so longer sequences are taller, then wider, grids.
Each answer symbol is in the column of its source, some rows below: a 1-D distance of a multiple
of W that the mark decides, a column offset of 0 for 2-D RoPE with grid_width = W. (The k PADs
shift every row by k positions, so a cell's encoded row may carry over by one, the same for a
whole column: differences within a column stay exact.)
"""
from tasks.common import PAD, QRY, SEP, SYM, assemble, check_length, rng

SYMBOLS = 16
VOCAB_SIZE = SYM + SYMBOLS
WIDTH = 8                             # the columns of the shortest grids (the border included)
MIN_LENGTH = 2 * WIDTH + 1            # a PAD, one row, the answer row


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
    marked = rows[r.randrange(len(rows))]
    marked[0] = QRY
    return assemble(length, [t for row in rows for t in row] + [SEP], marked[1:])


def reference(ids):
    """The marked row's symbols: from its QRY to the next border."""
    i = ids.index(QRY)
    return ids[i + 1:next(j for j in range(i + 1, len(ids)) if ids[j] < SYM)]
