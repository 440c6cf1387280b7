from configs.tasks.base import *  # noqa: F401,F403

# parity trains on the base recipe here (the task suite's runs are of it, and none learns it). The recipe that
# learned it in GPU trials (RoPE 3 of 3 seeds, learned positions 1 of 1, NoPE at chance; RoPE's seed 1337 92.5% on
# the CPU) is in configs/tasks/compare_gpu.py (docs/tasks.md, "The GPU trials").

task = "parity"
out_dir = "out-task-parity"
