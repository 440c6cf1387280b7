# The RoPE methods and fine-tune sweep at the quick recipe (configs/compare_quick.py: L = 256, 500 iterations,
# every RoPE method without and with fine-tunes at 4L of 1, 5, 25 and 100 iterations, about 0.1% to 20% of the
# pretraining tokens, 3 seeds) for RoPE, and ALiBi as the reference that extrapolates. A method's budgets are one
# fine-tune of 100 iterations evaluated at each. Not timed with the sweep yet (issue #11's single 100-iteration
# budget took under 15 minutes on a 2-core CPU); the sweep adds three evaluations per fine-tuned method.
#   python compare.py configs/compare_finetune.py
from configs.compare_quick import *  # the recipe of its committed report

only = "rope,alibi"
out_root = "out-compare-ft"
