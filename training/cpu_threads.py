"""How many intra-op threads a CPU process computes with (sample.py, evaluate.py; issue #14).

Torch's default is one thread per core. For the small models of this repository that is not
always the fastest: a batch-1 decode step is dozens of kernels too small to split between
threads, and when another process holds a core, a thread that waits for it stalls every
kernel (issue #14 saw 124 s with two threads against 6-7 s with one). So the count is
chosen, in this order: --threads=N; OMP_NUM_THREADS when set; the caller's fixed default
(decoding: decode.DECODE_THREADS); else one thread per core that other processes leave idle
now: the machine's CPU use sampled over 0.1 s (Linux /proc/stat; this process sleeps
meanwhile, so what is busy is someone else), at least one. Elsewhere: torch's default.

Why sampled and not timed: timing a batch with each count (tried first) picked right, but on
a 3-second evaluation the timing cost more than it saved (benchmarks/cpu-2core-quiet.md,
section 7); the 1-minute load average would count this user's own earlier runs as load.
"""
import os
import time

import torch

SAMPLE_SECONDS = 0.1


def cpu_times(path="/proc/stat"):
    """(all jiffies, idle jiffies) of the machine since boot, or None where there is no /proc/stat."""
    try:
        with open(path) as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields[:8]), fields[3] + fields[4]     # user..steal; idle + iowait


def busy_cores(cores, seconds=SAMPLE_SECONDS):
    """How many of `cores` other processes keep busy, sampled over `seconds`; None if unknown."""
    before = cpu_times()
    time.sleep(seconds)
    after = cpu_times()
    if before is None or after is None or after[0] <= before[0]:
        return None
    return cores * (1 - (after[1] - before[1]) / (after[0] - before[0]))


def choose(requested, device, default=None):
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
    elif default is not None or cores == 1 or (busy := busy_cores(cores)) is None:
        n, why = default or torch.get_num_threads(), "the default here, --threads=N to choose"
    else:
        n = max(1, cores - round(busy))
        why = f"{cores} cores, {busy:.1f} busy with other work now; --threads=N to choose"
    torch.set_num_threads(n)
    return f"{n} thread(s): {why}"
