from configs.tasks.base import *  # noqa: F401,F403

# parity trains on the base recipe here (the task suite's runs are of it, and none learns it). A recipe that does
# learn it was found on a GPU (docs/tasks.md, "The GPU trials"): 4 layers x 128, tie_embeddings=False,
# embed_std=1.0, learning rate 3e-4, 16,000-24,000 iterations (RoPE 3 of 3 seeds, learned 1 of 1, NoPE at chance;
# RoPE's seed 1337 92.5% at 16,000 on the CPU):
#   python -m tasks.trial parity rope --n_layer=4 --n_embd=128 --tie_embeddings=False --embed_std=1.0 \
#       --learning_rate=3e-4 --max_iters=16000

task = "parity"
out_dir = "out-task-parity"
