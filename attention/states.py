"""What encodings keep for one generation (FoX's gates, Floater's solved rows, CoPE's counts...), owned by the
generation's cache so that it is gone with it: the KV cache and linear attention's running sums share it."""
from torch import nn


class EncodingStates(nn.Module):
    """A cache's `states`: buffers made on first use by state(), dropped by drop_states() (a cache's reset)."""

    def __init__(self):
        super().__init__()
        self.states = {}

    def state(self, owner, name, make):
        """What an encoding keeps for this generation, made by make() on first use: a buffer."""
        key = (id(owner), name)
        if key not in self.states:
            value = make()   # first: make() may keep states of its own
            self.states[key] = f"state{len(self.states)}"
            self.register_buffer(self.states[key], value, persistent=False)
        return getattr(self, self.states[key])

    def drop_states(self):
        for name in self.states.values():
            delattr(self, name)
        self.states = {}
