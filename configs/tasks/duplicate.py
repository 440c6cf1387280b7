# duplicate's recipe: the base model, 8000 iterations at learning rate 1e-3. Measured on the 2-core Xeon beside
# the CPU headline (docs/tasks.md, "Recipes that learn"), exact match at L = 32 on 200 held-out examples, seed
# 1337: sinusoidal 96% (0% at 2500 iterations), RoPE 100% (100% already at 2500), NoPE 77%; ~3.5 min a run there.
#   python train.py configs/tasks/duplicate.py --pos_encoding=sinusoidal --seed=1337 --out_dir=out-task-duplicate
#   python evaluate.py out-task-duplicate --lengths=32 --samples=200
from configs.tasks.base import *  # noqa: F401,F403

task = "duplicate"
out_dir = "out-task-duplicate"
max_iters = 8000
lr_decay_iters = 8000
learning_rate = 1e-3
warmup_iters = 100
