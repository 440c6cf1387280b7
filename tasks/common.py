"""The token scheme shared by every task, and the helpers each task's file uses.

    0 PAD   the first token of every sequence (the <bos> of Kazemnejad et al. 2023) and the
            left filler that makes a length exact; never a target
    1 SEP   ends the input (or marks the passkey); 2 QRY asks a question (passkey)
    3...    the task's own symbols (digits, bits, keys, values): SYM + k

A task's vocabulary is SYM + its number of symbols, so every task has a small one.
Lengths count every token of the sequence, answer included; the model reads the first
length - 1 tokens and is scored on the answer tokens that the mask marks.
"""
import itertools
import random
from dataclasses import dataclass

PAD, SEP, QRY = 0, 1, 2
SYM = 3
# one printable character per id, so a task checkpoint carries a char tokenizer (sample.py shows sequences)
CHARS = ".|?0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ@#"


def char_meta(vocab_size):
    """The meta.pkl-style char vocabulary of ids 0..vocab_size-1 (data/tokenizer.py reads it)."""
    itos = {i: CHARS[i] for i in range(vocab_size)}
    return {"vocab_size": vocab_size, "itos": itos, "stoi": {c: i for i, c in itos.items()}}


@dataclass
class Example:
    ids: list      # token ids, exactly the requested length
    mask: list     # True where the token is part of the answer (the loss and the score)


def rng(seed) -> random.Random:
    """Every random choice of an example comes from this generator alone: same seed, same example."""
    return random.Random(seed)


def check_length(name, min_length, length):
    if not isinstance(length, int) or length < min_length:
        raise ValueError(f"task {name} needs a length >= {min_length} (its shortest sequence), got {length!r}")


def assemble(length, question, answer):
    """PAD * k + question + answer, with k >= 1 chosen so that the sequence has exactly `length` tokens."""
    k = length - len(question) - len(answer)
    assert k >= 1, (length, len(question), len(answer))
    ids = [PAD] * k + list(question) + list(answer)
    return Example(ids, [False] * (k + len(question)) + [True] * len(answer))


def strip_pad(ids):
    """The sequence without its leading PAD tokens."""
    return list(itertools.dropwhile(lambda t: t == PAD, ids))


def draw_distance(r, edges, lo, hi):
    """A distance in [lo, hi] drawn so that the bins [edges[i], edges[i+1]) are covered evenly: one of the bins that
    meet [lo, hi] uniformly, then a distance uniformly in their common part (distance-binned scoring: tasks/score.py);
    hi itself where no bin meets it."""
    bins = [(max(a, lo), min(b - 1, hi)) for a, b in zip(edges, edges[1:]) if a <= hi and b - 1 >= lo]
    if not bins:
        return hi
    a, b = bins[r.randrange(len(bins))]
    return r.randint(a, b)


def answer_runs(mask):
    """[(start, end)] of each answer: a maximal run of consecutive answer tokens of the mask."""
    runs, start = [], None
    for i, m in enumerate(list(mask) + [False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs

