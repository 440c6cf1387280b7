# reverse's recipe: the base model, 6000 iterations at learning rate 1e-3. Measured on the 2-core Xeon,
# busy with other sessions (docs/tasks.md, "Recipes that learn"): RoPE's exact match at L = 32 on 200
# held-out examples 97.5% for seed 1337 (one seed; 2500 iterations gave 88%, 4000 gave 93.5%); 10 min.
#   python train.py configs/tasks/reverse.py --pos_encoding=rope --seed=1337 --out_dir=out-task-reverse
#   python evaluate.py out-task-reverse --lengths=32 --samples=200
from configs.tasks.base import *  # noqa: F401,F403

task = "reverse"
out_dir = "out-task-reverse"
max_iters = 6000
lr_decay_iters = 6000
learning_rate = 1e-3
warmup_iters = 100
