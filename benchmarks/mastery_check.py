"""The cost of one --stop_at_mastery check (training/mastery.py): seconds to score exact match at L on the held-out
examples of copy, passkey and mqar, with configs/tasks/base.py's model (3 layers x 64, L = 32, RoPE; untrained, so
every answer is decoded in full), 200 examples, one thread.

    python benchmarks/mastery_check.py
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository root
import torch  # noqa: E402

import tasks  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from tasks import score  # noqa: E402
from training.mastery import HeldOut  # noqa: E402


def main():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for name in ("copy", "passkey", "mqar"):
        model = GPT(GPTConfig(n_layer=3, n_head=4, n_embd=64, block_size=32, vocab_size=tasks.get(name).VOCAB_SIZE,
                              pos_encoding="rope", dropout=0.0)).eval()
        t0 = time.perf_counter()
        exact, _ = score.accuracy(model, HeldOut(tasks.get(name)), 32, 200)
        print(f"{name}: {time.perf_counter() - t0:.2f} s for 200 examples at L = 32 (exact match {exact:.1%})")


if __name__ == "__main__":
    main()
