# The quick subset of the task comparison (docs/tasks.md), sized for a 2-core CPU:
#   python compare.py configs/tasks/quick.py
# 2 tasks x 4 encodings x 3 seeds = 24 runs of the base recipe (800 iterations), scored at 1-8x with 100 samples.
from configs.tasks.base import *  # noqa: F401,F403

suite = "tasks"               # compare.py's task suite: accuracy against length

tasks = ["copy", "passkey"]
encodings = ["none", "sinusoidal", "rope", "alibi"]
seeds = 3
jobs = 2                      # runs side by side, one thread each (measured faster on 2 cores: benchmarks/history.md)
out_root = "out-tasks-quick"
samples = 100
multiples = [1, 2, 4, 8]
