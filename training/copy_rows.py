"""Rows of repeated random spans mixed into a training batch: the signal under which in-context copying
(an induction mechanism: attend to the token after the previous occurrence of the current one) forms in a small
model within a CPU budget (issue #49; Olsson et al. 2022, arXiv:2209.11895, sec. 2 and 5, train on natural text
and see it form only after ~2.5-5e9 tokens -- far past this project's 12.3M).

A row replaced here holds one span of n random ids (n drawn uniformly from span = (lo, hi)) written back to back
until the row is full. Its first copy cannot be predicted, so its targets are -1 (ignored by the loss); every later
token is predictable only by copying from one span back. Draws come from the batch generator, so a resumed run
draws the same rows (train.py restores that generator).
"""
import torch


def mix_copies(x, y, fraction, span, vocab, generator):
    """x, y (B, T) -> the same with the first round(fraction * B) rows replaced by repeated random spans."""
    B, T = x.shape
    lo, hi = span
    for i in range(round(fraction * B)):
        n = int(torch.randint(lo, hi + 1, (1,), generator=generator))
        ids = torch.randint(vocab, (n,), generator=generator)
        row = ids.repeat(T // n + 2)[:T + 1]                 # (T + 1,)
        x[i] = row[:-1]
        y[i] = row[1:]
        y[i, :n - 1] = -1                                    # the first copy's targets: unpredictable
    return x, y
