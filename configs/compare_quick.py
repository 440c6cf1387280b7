# The quick recipe of the comparisons before issue #24 (L = 256, 500 iterations of 2,048 tokens: 1.02M tokens a
# run, where no model beats the count 4-gram): the recipe of the committed reports of configs/compare_family.py,
# compare_variants.py and compare_finetune.py, kept so that their commands still reproduce them.
from configs.compare import *  # noqa: F401,F403

batch_size = 8                # 2,048 tokens per iteration
max_iters = 500               # 1.02M tokens per run
lr_decay_iters = 500
warmup_iters = 50
eval_interval = 50
eval_iters = 10
log_interval = 25
out_root = "out-compare-quick"
finetune_iters = [max(1, round(p * max_iters)) for p in (0.001, 0.01, 0.05, 0.2)]   # [1, 5, 25, 100]
context_labels = ["rope+ntk", "rope+yarn", "rope+leaky_rerope"] + [f"rope+{m} ft{finetune_iters[-1]}" for m in (
    "direct", "linear", "yarn", "longlora")]
