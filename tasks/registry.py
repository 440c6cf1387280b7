"""The tasks by name: REGISTRY and get (the package's tasks.get and tasks.REGISTRY), a module of its own so that
tasks/data.py can look a task up without importing the package that imports it."""
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
