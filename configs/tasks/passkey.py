# passkey's recipe: the base model, 2500 iterations at learning rate 1e-3 (copy's until 2026-11-26). Measured on
# the 2-core Xeon beside the CPU headline (docs/tasks.md, "Recipes that learn"): exact match at L = 32 on 200
# held-out examples 100% for RoPE, sinusoidal and NoPE (seed 1337; the base recipe left sinusoidal at 45-68%);
# ~85 s a run.
#   python train.py configs/tasks/passkey.py --pos_encoding=sinusoidal --seed=1337 --out_dir=out-task-passkey
#   python evaluate.py out-task-passkey --lengths=32 --samples=200
from configs.tasks.base import *  # noqa: F401,F403

task = "passkey"
out_dir = "out-task-passkey"
max_iters = 2500
lr_decay_iters = 2500
learning_rate = 1e-3
warmup_iters = 100
