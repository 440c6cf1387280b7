# The shared recipe of configs/tasks/<task>.py: a small GPT trained on one synthetic task
# (tasks/) at lengths up to block_size, then scored from 1x to 16x that length:
#   python train.py configs/tasks/copy.py --pos_encoding=alibi --out_dir=out-task-copy-alibi
#   python evaluate.py out-task-copy-alibi
# Loss and scores count the answer tokens only. The keys of config.py all apply.
block_size = 32               # the training length L: sequences of MIN_LENGTH..L tokens, uniform
batch_size = 32
n_layer = 3
n_head = 4
n_embd = 64
dropout = 0.0
learning_rate = 3e-3
max_iters = 800
lr_decay_iters = 800
min_lr = 1e-4
warmup_iters = 50
weight_decay = 0.1
eval_interval = 200
eval_iters = 10
log_interval = 50
