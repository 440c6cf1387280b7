# Train short, test long, one run at a time: the training recipe of configs/compare.py
# (block_size 64, 4 x 4 x 128, 500 iterations x 2,048 tokens, ~45 s on 2 free cores), for
# evaluating by hand with evaluate.py from 1x to 16x the training length:
#   python train.py configs/extrapolation.py --pos_encoding=alibi --out_dir=out-x-alibi
#   python evaluate.py out-x-alibi out-x-rope --lengths=64,128,256,512,1024
# compare.py runs the same for every encoding in one command (docs/comparison.md).
from configs.base import *

block_size = 64
max_iters = 500
lr_decay_iters = 500
warmup_iters = 50
eval_interval = 50
eval_iters = 10
log_interval = 25
pos_encoding = "rope"
out_dir = "out-x-rope"
