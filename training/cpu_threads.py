"""How many intra-op threads a CPU process computes with (sample.py, evaluate.py). In order:
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
        if default is None and cores > 1 and (before := cpu_times()) is not None:
            time.sleep(0.1)   # how many cores other processes keep busy over 0.1 s
            after = cpu_times()
            if after is not None and after[0] > before[0]:
                busy = cores * (1 - (after[1] - before[1]) / (after[0] - before[0]))
                n = max(1, cores - round(busy))
                why = f"{cores} cores, {busy:.1f} busy with other work now; --threads=N to choose"
    torch.set_num_threads(n)
    return f"{n} thread(s): {why}"
