# Issue #11's quick recipe (under 15 minutes on a 2-core CPU): the headline comparison
# (configs/compare.py: L = 256, every RoPE method with and without a 4L fine-tune, 3 seeds) for
# RoPE, and ALiBi as the reference that extrapolates. Measured time: benchmarks/history.md.
#   python compare.py configs/compare_finetune.py
from configs.compare import *  # the headline recipe

only = "rope,alibi"
out_root = "out-compare-ft"
