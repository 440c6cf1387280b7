# PI's Table 4 in miniature (Chen et al. 2023, https://arxiv.org/abs/2306.15595, section 3.2): RoPE
# pretrained on passkey at L = 32 (the base recipe), fine-tuned at 4L = 128 directly (no scaling, PI's
# "FT") and with PI (linear), YaRN and NTK-aware scaling, each scored after 25, 50, 100, 200, 400 steps
# (and at 0: the pretrained model with the method's scaling); the report gives PI's effective context
# window (passkey retrieval >= 20% at every length up to it, every depth) against the steps, 5 seeds:
#   python compare.py configs/tasks/passkey_pi.py
# The fine-tune is compare.py's (batch_size / 4 sequences of 4L, learning rate held at min_lr).
# Not run in full on the 2-core CPU (hours); tests/test_tasks_mastery.py runs it at tiny size.
from configs.tasks.base import *  # noqa: F401,F403

suite = "tasks"
tasks = ["passkey"]
encodings = ["rope"]
seeds = 5
jobs = 2
out_root = "out-tasks-pi"
report_dir = "reports/tasks-pi"
samples = 100
multiples = [1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4]   # PI's window is the largest scored length: a fine grid to 4L
rope_scalings = ["linear", "yarn", "ntk"]
finetune_factor = 4.0
finetune_steps = [25, 50, 100, 200, 400]
