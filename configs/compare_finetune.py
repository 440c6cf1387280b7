# Issue #11's quick recipe: do the RoPE extension methods do what their papers say when run
# the way the papers run them? RoPE (and ALiBi as the reference that extrapolates) pretrained
# at L = 256, where YaRN's thresholds mean something (its fastest pair turns L/2pi ~ 41 times
# in L, past beta_fast = 32), 3 seeds; then every frequency method evaluated from 1x to 16x L
# without fine-tuning and after a short fine-tune at 4L (and the "direct" fine-tune without
# scaling, PI's control). Measured time: see README ("Extension methods, fine-tuned").
#   python compare.py configs/compare_finetune.py
from configs.compare import *  # the comparison's recipe (data, model shape 4 x 4 x 128, optimiser)

only = "rope,alibi"
seeds = 3
out_root = "out-compare-ft"
report_dir = ""

block_size = 256
batch_size = 8                # 2,048 tokens per iteration, as in configs/compare.py
max_iters = 500               # 1.02M tokens per run
lr_decay_iters = 500

eval_lengths = [256, 512, 1024, 2048, 4096]
eval_tokens = 8192
rope_scalings = ["linear", "ntk", "dynamic", "ntk_by_parts", "yarn", "llama3", "rerope", "leaky_rerope"]
rope_factor = 4.0             # s: the methods target 4L = 1024 tokens
finetune_iters = 100          # PI fine-tunes ~1000 steps, YaRN 400; scaled to this model's 500-step pretraining
finetune_factor = 4.0
