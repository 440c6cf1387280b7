"""grid: a 2-D lookup: the symbol right below the marked cell of a grid read row by row
(for 2-D RoPE, positional/rope_2d.py; the issue #26 comparison: docs/tasks.md).

    PAD s s s s s s s         R rows of W tokens: PAD (a left border), then W - 1 symbols of 16;
    PAD s s QRY s s s         one cell outside the last row is QRY (the mark)
    PAD s s  a  s s s
    PAD..  SEP | a            PADs up to length - 2, SEP, the answer: the symbol below the mark

W = 8 while the length is below 4 W^2 and doubles each time it reaches it (16 from 256 tokens,
32 from 1024); R = (length - 2) // W. The grid starts at position 0, so cell (r, c) is at
position r W + c: 2-D RoPE with grid_width = W reads (row, col), and the answer is the token W
positions after the mark, a distance that changes with the width (a 1-D encoding trained on 8
columns has seen only 8).
"""
from tasks.common import PAD, QRY, SEP, SYM, Example, check_length, rng

SYMBOLS = 16
VOCAB_SIZE = SYM + SYMBOLS
WIDTH = 8                             # the columns of the shortest grids (the border included)
MIN_LENGTH = 2 * WIDTH + 2            # two rows, SEP, the answer


def width(length):
    """The grid's columns at this length: WIDTH, doubled each time the length reaches 4 W^2."""
    w = WIDTH
    while length >= 4 * w * w:
        w *= 2
    return w


def generate(seed, length) -> Example:
    check_length("grid", MIN_LENGTH, length)
    r, w = rng(seed), width(length)
    rows = [[PAD] + [SYM + r.randrange(SYMBOLS) for _ in range(w - 1)] for _ in range((length - 2) // w)]
    mark_row, mark_col = r.randrange(len(rows) - 1), r.randrange(1, w)
    answer = rows[mark_row + 1][mark_col]
    rows[mark_row][mark_col] = QRY
    grid = [t for row in rows for t in row]
    ids = grid + [PAD] * (length - 2 - len(grid)) + [SEP, answer]
    return Example(ids, [False] * (length - 1) + [True])


def reference(ids):
    """The symbol one row below the mark; the width is where the second row's border stands."""
    return [ids[ids.index(QRY) + ids.index(PAD, 1)]]
