# addition's recipe: a larger model, 4 layers x 128 wide (4 heads), 8000 iterations at learning rate 1e-3. Measured
# on the 2-core Xeon beside the task suite (docs/tasks.md, "Recipes that learn", python -m tasks.trial): RoPE's
# exact match at L = 32 on 200 held-out examples 100% (seed 1337; ~11 min a run there); the base model stayed at
# 0%, 7% and 5% after 2500, 8000 and 20,000 iterations.
# Not reproduced: the same trial on the AMD EPYC scored 4.5%, and in the task suite one run of 27 learned addition
# under this recipe (RoPE, seed 1339; docs/tasks.md).
#   python train.py configs/tasks/addition.py --pos_encoding=rope --seed=1337 --out_dir=out-task-addition
#   python evaluate.py out-task-addition --lengths=32 --samples=200
from configs.tasks.base import *  # noqa: F401,F403

task = "addition"
out_dir = "out-task-addition"
n_layer = 4
n_embd = 128
max_iters = 8000
lr_decay_iters = 8000
learning_rate = 1e-3
warmup_iters = 100
