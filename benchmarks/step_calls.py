"""What one static eager decode step calls, counted rather than timed (the count does not move with the machine's
load): Python function calls (cProfile) and aten operator calls (a dispatch mode), per encoding, at the recipe
shape (4 layers x 4 heads x 128, block and window 128), one token after a 100-token prompt.

    python benchmarks/step_calls.py rope alibi
"""
import cProfile
import os
import pstats
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository root
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from generate import Decoder  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


@torch.no_grad()
def counts(name):
    torch.manual_seed(0)
    cfg = GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=128, window=128, vocab_size=77, pos_encoding=name,
                    dropout=0.0, bias=False)
    d = Decoder(GPT(cfg).eval())
    d.open(1, 2001, torch.device("cpu"))
    d.prefill(torch.zeros(1, 100, dtype=torch.long))
    tok = torch.zeros(1, 1, dtype=torch.long)
    d.next(tok)   # the first step makes what the generation keeps (tables): not counted
    with CountOps() as ops:
        d.next(tok)
    profile = cProfile.Profile()
    profile.runcall(d.next, tok)
    return pstats.Stats(profile).total_calls, ops.n


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        sys.exit(print(__doc__))
    torch.set_num_threads(1)
    print(f"{'encoding':16s} {'python calls':>12s} {'aten calls':>10s}")
    for name in sys.argv[1:] or ["rope"]:
        print("{:16s} {:12d} {:10d}".format(name, *counts(name)))
