# The task suite's two unlearned tasks at the budgets a GPU found (docs/tasks.md, "The GPU trials"): parity on 4
# layers x 128 with its head untied, embed_std=1.0 and learning rate 3e-4 for 16,000 iterations (RoPE 3 of 3 seeds
# and learned positions 1 of 1 in the trials), addition on its own recipe for 24,000 iterations (NoPE, learned and
# sinusoidal learned it there); every encoding of configs/tasks/compare.py, three seeds: 54 runs. For a machine
# with a GPU, many runs side by side (the trials ran twelve on one H200 at about 60 iterations/s each); it resumes
# where it stopped, so it can be run across short GPU sessions:
#   python compare.py configs/tasks/compare_gpu.py --device=cuda --jobs=12 --threads=1
# Not run yet (2026-11-28): on the 2-core CPU, two runs side by side, it would take about 10-15 hours.
from configs.tasks.compare import *  # noqa: F401,F403
from configs.tasks.compare import task_recipes as _suite_recipes

tasks = ["parity", "addition"]
task_recipes = {
    "parity": {"max_iters": 16000, "lr_decay_iters": 16000, "learning_rate": 3e-4, "warmup_iters": 100,
               "n_layer": 4, "n_embd": 128, "tie_embeddings": False, "embed_std": 1.0},
    "addition": {**_suite_recipes["addition"], "max_iters": 24000, "lr_decay_iters": 24000},
}
out_root = "out-tasks-gpu"
report_dir = "reports/tasks-suite-gpu"
