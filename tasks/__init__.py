"""Synthetic length-generalisation tasks: one small file each, no dataset needed.

Each task module has
    generate(seed, length) -> Example(ids, mask)   exactly `length` tokens; mask = the answer tokens
    reference(ids) -> answer tokens                 computed from the question alone, so it also
                                                    answers a prefix that stops inside the answer
    VOCAB_SIZE, MIN_LENGTH
and optionally
    places(ids) -> ints, one a token                each token's place in its number (addition), for the
                                                    encodings that read it (abacus, coupling)
Same seed, same example. The answer's positions depend on the length alone (the scorer
decodes a batch in lockstep). The token scheme is in common.py.

    import tasks
    ex = tasks.get("copy").generate(seed=0, length=32)
    data = tasks.TaskData("copy")        # train.py's data source when --task is set
"""
import difflib

from tasks import addition, copy, duplicate, grid, mqar, parity, passkey, reverse
from tasks.data import TaskData  # noqa: F401

REGISTRY = {"copy": copy, "reverse": reverse, "duplicate": duplicate, "parity": parity,
            "addition": addition, "passkey": passkey, "mqar": mqar,
            "grid": grid}


def get(name):
    """The task module called `name`; an unknown name is a one-line ValueError."""
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, REGISTRY, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown task {name!r}; {hint}valid: {', '.join(REGISTRY)}")
    return REGISTRY[name]
