"""Microseconds of a static eager decode step per encoding, and its ratio to the first encoding's in the same
process: the recipe shape (4 layers x 4 heads x 128, window 128), one thread, after a 200-token prompt, median of 5
rounds of 150 steps, the encodings alternating inside each round. To compare two commits, run it from both checkouts
in alternating processes (the first argument is the checkout whose model.py is imported):

    for i in 1 2 3 4; do
        python benchmarks/step_ab.py ../before rope,shaw
        python benchmarks/step_ab.py . rope,shaw
    done
"""
import statistics
import sys
import time

if len(sys.argv) != 3 or {"-h", "--help"} & set(sys.argv):
    print(__doc__)
    sys.exit(0 if {"-h", "--help"} & set(sys.argv) else "usage: python benchmarks/step_ab.py <checkout> <encodings>")
sys.path.insert(0, sys.argv[1])
import torch  # noqa: E402

from generate import Decoder  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def decoders(names):
    """{name: Decoder after a 200-token prompt} for the encodings that decode with a static cache past the block."""
    out = {}
    for name in names:
        torch.manual_seed(0)
        cfg = GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=128, window=128, vocab_size=77, pos_encoding=name,
                        dropout=0.0, bias=False)
        model = GPT(cfg).eval()
        if model.static_decoding and not model.max_positions:
            out[name] = Decoder(model)
            out[name].open(1, 4101, torch.device("cpu"))
            out[name].prefill(torch.zeros(1, 200, dtype=torch.long))
    return out


if __name__ == "__main__":
    torch.set_num_threads(1)
    ds, tok = decoders(sys.argv[2].split(",")), torch.zeros(1, 1, dtype=torch.long)
    times = {n: [] for n in ds}
    for _ in range(5):
        for name, d in ds.items():
            t = time.perf_counter()
            for _ in range(150):
                d.next(tok)
            times[name].append((time.perf_counter() - t) / 150 * 1e6)
    first = statistics.median(next(iter(times.values())))
    for name in ds:
        us = statistics.median(times[name])
        print(f"{name:18s} {us:7.0f} us  {us / first:5.2f}x {next(iter(ds))}")
