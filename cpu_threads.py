"""How many intra-op threads a CPU process computes with (sample.py, evaluate.py; issue #14).

Torch's default is one thread per core. For the small models of this repository that is not
always the fastest: a batch-1 decode step is dozens of kernels too small to split between
threads, and when another process holds a core, a thread that waits for it stalls every
kernel (issue #14 saw 124 s with two threads against 6-7 s with one). So the count is
chosen, in this order: --threads=N; OMP_NUM_THREADS when set; the caller's fixed default
(decoding: decode.DECODE_THREADS); else measured on the spot: the caller's probe (one
forward pass of the work to come) timed with one thread and with all cores, interleaved,
and the faster kept. The measurement is taken now, so it sees the load of this moment.
benchmarks/threads-cpu-2core.md has the measured figures.
"""
import os
import statistics
import time

import torch


def fastest(probe, counts, repeats=3):
    """{n: median seconds of probe() under n threads}; one untimed call per count first,
    then `repeats` rounds, the counts interleaved within each round."""
    for n in counts:
        torch.set_num_threads(n)
        probe()
    times = {n: [] for n in counts}
    for _ in range(repeats):
        for n in counts:
            torch.set_num_threads(n)
            t = time.perf_counter()
            probe()
            times[n].append(time.perf_counter() - t)
    return {n: statistics.median(v) for n, v in times.items()}


def choose(requested, device, default=None, probe=None):
    """Set this process's intra-op threads on a CPU; return a few words saying how many and
    why (None off a CPU, where threads do not decide the speed). requested > 0: that many."""
    if not device.startswith("cpu"):
        return None
    env = os.environ.get("OMP_NUM_THREADS", "")
    cores = os.cpu_count() or 1
    if requested:
        n, why = requested, "--threads"
    elif env.isdigit() and int(env) > 0:
        n, why = int(env), "OMP_NUM_THREADS"
    elif default is not None or probe is None or cores == 1:
        n, why = default or torch.get_num_threads(), "the default here, --threads=N to choose"
    else:
        timed = fastest(probe, sorted({1, cores}))
        n = min(timed, key=timed.get)
        why = "measured fastest now (" + ", ".join(f"{k}: {v * 1000:.0f} ms" for k, v in timed.items()) + \
              " per batch), --threads=N to choose"
    torch.set_num_threads(n)
    return f"{n} thread(s): {why}"
