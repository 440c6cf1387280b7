# The headline experiment of the README: train short, test long (Press et al. 2022).
# Every encoding is trained with this recipe at block_size 64, then evaluated from 1x to
# 16x that length with evaluate.py. A 0.8M-parameter model, 600 iterations of 32 x 64
# tokens: 200 iterations took 72 s with OMP_NUM_THREADS=1 on a busy 2-core machine
# (~0.33 s/it), so about 3 minutes per encoding, two encodings at a time on 2 cores.
#   OMP_NUM_THREADS=1 python train.py configs/extrapolation.py --pos_encoding=alibi --out_dir=out-x-alibi
from configs.base import *

block_size = 64
batch_size = 32
n_layer = 4
n_head = 4
n_embd = 128
max_iters = 600
lr_decay_iters = 600
warmup_iters = 50
eval_interval = 200
eval_iters = 10
log_interval = 50
pos_encoding = "rope"
out_dir = "out-x-rope"
