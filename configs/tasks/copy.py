# copy's recipe: the base model, 8000 iterations at learning rate 1e-3 (duplicate's). At 2500 iterations RoPE and
# ALiBi learned copy (100% exact match at L for RoPE, seeds 1337-1339) but sinusoidal, T5 and NoPE stayed at
# 0-1.5% and learned at 70-96% (the task suite's first 27 runs, reports/tasks-suite before 2026-11-26); at 8000,
# seed 1337: sinusoidal 98%, T5 98%, learned 100% (docs/tasks.md, "Recipes that learn", python -m tasks.trial;
# the 2-core Xeon with the suite beside it, ~3 min a run).
#   python train.py configs/tasks/copy.py --pos_encoding=sinusoidal --seed=1337 --out_dir=out-task-copy
#   python evaluate.py out-task-copy --lengths=32 --samples=200
from configs.tasks.base import *  # noqa: F401,F403

task = "copy"
out_dir = "out-task-copy"
max_iters = 8000
lr_decay_iters = 8000
learning_rate = 1e-3
warmup_iters = 100
