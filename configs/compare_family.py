# Issue #26's systems beside three references, at the quick recipe (configs/compare_quick.py: L = 256,
# 500 iterations, 3 seeds): learnable and hybrid RoPE, multiplicative, convolutional, recurrent,
# FLOATER, complex-order and DeBERTa positions. No RoPE methods or fine-tunes (configs/compare.py has them).
#   python compare.py configs/compare_family.py
from configs.compare_quick import *  # noqa: F401,F403

only = "none,rope,alibi,rope_learned_freq,rope+alibi,multiplicative,conv,rnn,floater,complex_order,deberta"
rope_scalings = []
finetune_iters = 0
context_labels = []
out_root = "out-compare-family"
report_dir = "reports/compare-family"
