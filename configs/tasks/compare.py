# The full task comparison: every task x 6 encodings x 3 seeds, scored from 1x to 16x the
# training length with 200 samples per point (docs/tasks.md; its measured time: benchmarks/history.md):
#   python compare.py configs/tasks/compare.py
from configs.tasks.base import *  # noqa: F401,F403

suite = "tasks"               # compare.py's task suite: accuracy against length

tasks = ["copy", "reverse", "duplicate", "parity", "addition", "passkey", "mqar"]
encodings = ["none", "learned", "sinusoidal", "t5", "rope", "alibi"]
seeds = 3
jobs = 2
out_root = "out-tasks"
samples = 200
multiples = [1, 2, 4, 8, 16]
