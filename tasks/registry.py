"""The task registry: name -> task module (tasks/__init__.py re-exports it; tasks/data.py reads it)."""
import difflib

from tasks import addition, copy, duplicate, grid, mqar, parity, passkey, reverse

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
