"""Issue #22: does an inductor option remove the compiled decode step's host overhead? Tokens/s of
Decoder.generate (compiled static step) under each option set, rounds interleaved, medians, one thread.

    python benchmarks/decode_options.py --encodings=rope,alibi --tokens=2000 --rounds=3

Each option set compiles its own copy of generate.decode_step (torch.compile(..., options=...)); the
default row is generate.compiled_step as sample.py uses it. Prints one table; writes nothing.
"""
import os
import statistics
import sys
import time
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from measure.bench_decode import machine_name  # noqa: E402
from generate import Decoder, decode_step  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from training.cli import parse  # noqa: E402

OPTIONS = {   # inductor options (torch._inductor.config) tried against the host overhead
    "default": None,
    "cpp_wrapper": {"cpp_wrapper": True},                      # the graph's wrapper in C++, not Python
    "no size asserts": {"size_asserts": False},                # skip the wrapper's stride checks
    "freezing": {"freezing": True},                            # weights folded as constants (prepacked)
    "cpp_wrapper, no asserts": {"cpp_wrapper": True, "size_asserts": False},
}


def decoder(name, options, window, seed=0):
    torch.manual_seed(seed)
    cfg = GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=64, vocab_size=65, pos_encoding=name,
                    dropout=0.0, bias=False, window=window)
    d = Decoder(GPT(cfg).eval(), compile=True)
    if options is not None:   # its own code object, so each option set compiles (and recompiles) on its own
        code = types.FunctionType(decode_step.__code__.replace(), decode_step.__globals__, "decode_step")
        compiled = {p: torch.compile(code, fullgraph=True, dynamic=not p, options=options) for p in (True, False)}
        d.open = types.MethodType(lambda self, *a, f=Decoder.open: (f(self, *a), setattr(
            self, "step", compiled[bool(self.cache.period)]))[0], d)
    return d


def main(argv):
    opts = parse(argv, dict(encodings="rope,alibi", tokens=2000, rounds=3, window=64), doc=__doc__)[0]
    torch.set_num_threads(1)
    print(f"machine: {machine_name('cpu')}, torch {torch.__version__}, 1 thread")
    start = torch.zeros(1, 1, dtype=torch.long)
    for name in opts["encodings"].split(","):
        runs = {label: decoder(name, o, opts["window"]) for label, o in OPTIONS.items()}
        run = lambda d: d.generate(start, opts["tokens"], 0.8, 200, torch.Generator().manual_seed(0))  # noqa: E731
        for d in runs.values():
            run(d)   # compiles
        times = {label: [] for label in runs}
        for _ in range(opts["rounds"]):
            for label, d in runs.items():
                t = time.perf_counter()
                run(d)
                times[label].append(time.perf_counter() - t)
        base = statistics.median(times["default"])
        print(f"\n{name}, 4L 4H 128C, window {opts['window']}, {opts['tokens']} tokens, median of {opts['rounds']}")
        print(f"{'options':<26}{'tokens/s':>10}{'us/token':>10}{'vs default':>12}")
        for label, ts in times.items():
            m = statistics.median(ts)
            print(f"{label:<26}{opts['tokens'] / m:10.0f}{m / opts['tokens'] * 1e6:10.0f}{base / m:12.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
