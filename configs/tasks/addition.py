# addition's recipe: a larger model, 4 layers x 128 wide (4 heads), its output head untied and its token embedding
# drawn at std 1.0 (mqar's fix: docs/tasks.md, "What kept mqar from being learned"), 8000 iterations at learning
# rate 1e-3. Trials on the 2-core Xeon (python -m tasks.trial, reports/tasks-recipes/trials.csv): RoPE 100% and
# 99.5% exact match at L = 32 on 200 held-out examples (seeds 1337, 1338), NoPE 1.5%. Without the two keys the same
# model gave RoPE 100% on the Xeon and 4.5% on an AMD EPYC (seed 1337), and one run of 27 learned it in the suite.
# Which encodings learn it under this recipe: the task suite's mastery table (docs/results.md).
# At 24,000 iterations NoPE, learned and sinusoidal positions learned it too in GPU trials (100%, a run each; NoPE
# 88% in the same trial on the CPU; docs/tasks.md).
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
tie_embeddings = False
embed_std = 1.0
