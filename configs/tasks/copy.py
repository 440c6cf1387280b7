# copy's recipe: the base model, 2500 iterations at learning rate 1e-3 (the base recipe's 800 at 3e-3
# leaves RoPE at 11% exact match at L in the quick subset). Measured on the 2-core Xeon, busy with
# other sessions (docs/tasks.md, "Recipes that learn"): RoPE's exact match at L = 32 on 200 held-out
# examples 100%, 100%, 100% for seeds 1337, 1338, 1339; 2.5 min per run with free cores, 11-17 min busy.
#   python train.py configs/tasks/copy.py --pos_encoding=rope --seed=1337 --out_dir=out-task-copy
#   python evaluate.py out-task-copy --lengths=32 --samples=200
from configs.tasks.base import *  # noqa: F401,F403

task = "copy"
out_dir = "out-task-copy"
max_iters = 2500
lr_decay_iters = 2500
learning_rate = 1e-3
warmup_iters = 100
