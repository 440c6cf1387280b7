"""How many intra-op threads a CPU process computes with (sample.py, evaluate.py), and whether other
work keeps the machine busy (busy_note: train.py's line). Threads, in order:
--threads=N; OMP_NUM_THREADS; the caller's default (decoding: DECODE_THREADS); else one per
core that other processes leave idle, sampled from /proc/stat over 0.1 s: a thread waiting for a
core another process holds stalls every kernel (benchmarks/cpu-2core-quiet.md, section 7)."""
import os
import time

import torch

# Threads for a batch-1 decode step on CPU (sample.py's default): two gain the compiled step 30% when quiet
# but stall many times over with another process on a core (benchmarks/cpu-2core-quiet.md, issue #14).
DECODE_THREADS = 1


def cpu_times(path="/proc/stat"):
    """(all jiffies, idle jiffies) of the machine since boot, or None where there is no /proc/stat."""
    try:
        with open(path) as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(fields[:8]), fields[3] + fields[4]     # user..steal; idle + iowait


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
    else:
        n, why = default or torch.get_num_threads(), "the default here, --threads=N to choose"
        busy = busy_cores(cores) if default is None and cores > 1 else None
        if busy is not None:
            n = max(1, cores - round(busy))
            why = f"{cores} cores, {busy:.1f} busy with other work now; --threads=N to choose"
    torch.set_num_threads(n)
    return f"{n} thread(s): {why}"


def busy_cores(cores):
    """How many of `cores` other processes keep busy over 0.1 s (from /proc/stat), or None where unknown."""
    before = cpu_times()
    if before is None:
        return None
    time.sleep(0.1)
    after = cpu_times()
    if after is None or after[0] <= before[0]:
        return None
    return cores * (1 - (after[1] - before[1]) / (after[0] - before[0]))


def busy_note(what="training"):
    """One line when other work keeps half a core or more of this machine busy (train.py says it before
    its first step, as evaluate.py's thread count does), else None."""
    cores = os.cpu_count() or 1
    busy = busy_cores(cores)
    if busy is None or busy < 0.5:
        return None
    return (f"note: {busy:.1f} of {cores} cores are busy with other work now, so {what} runs slower than on a "
            f"quiet machine (the README's times are quiet-machine times)")
