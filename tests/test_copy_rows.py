"""training/copy_rows.py: rows of a repeated random span, the first copy's targets ignored, drawn from the batch
generator alone (so a resumed run draws the same rows)."""
import torch

from training.copy_rows import mix_copies


def batch(seed, fraction=0.5, span=(4, 6), B=4, T=20, vocab=50):
    x = torch.full((B, T), 7)
    y = torch.full((B, T), 8)
    return mix_copies(x, y, fraction, span, vocab, torch.Generator().manual_seed(seed))


def test_replaced_rows_repeat_one_span_and_ignore_its_first_copy():
    x, y = batch(0)
    for i in range(2):                               # round(0.5 * 4) rows replaced
        n = int((y[i] == -1).sum()) + 1              # the span's length: its first n - 1 targets are ignored
        assert 4 <= n <= 6
        row = torch.cat([x[i], y[i, -1:]])           # (T + 1,) the row's ids
        assert torch.equal(row[n:], row[:-n])        # period n: each id equals the one a span back
        assert torch.equal(y[i, n - 1:], row[n:])    # targets past the first copy: the row shifted by one
    assert (x[2:] == 7).all() and (y[2:] == 8).all()  # the other rows are the corpus's, untouched


def test_the_rows_come_from_the_generator_alone():
    assert all(torch.equal(a, b) for a, b in zip(batch(3), batch(3)))
    assert not torch.equal(batch(3)[0], batch(4)[0])


def test_no_fraction_no_change():
    x, y = batch(0, fraction=0.0)
    assert (x == 7).all() and (y == 8).all()
