from configs.tasks.base import *  # noqa: F401,F403

task = "mqar"
out_dir = "out-task-mqar"
# mqar's recipe (docs/tasks.md, "What kept mqar from being learned"): GPT-2's tied head and 0.02 embeddings keep the
# lookup on a plateau; untied, embeddings at std 1, 8000 iterations: exact match at L = 32 on 200 held-out examples
# 100% and 99.5% (RoPE, seeds 1337, 1338), 100% (learned, seed 1337), AMD EPYC (python -m tasks.trial).
tie_embeddings = False
embed_std = 1.0
max_iters = 8000
lr_decay_iters = 8000
learning_rate = 1e-3
warmup_iters = 100
