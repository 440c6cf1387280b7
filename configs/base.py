# The shared recipe of every configs/<encoding>.py: a char-level Shakespeare GPT that
# trains in 12.5-13 minutes on a quiet 2-core CPU (rope; measured in issue #10). The per-encoding files change only the
# encoding and the output folder, so their runs are comparable.
dataset = "shakespeare_char"
batch_size = 32
block_size = 128
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0
learning_rate = 2e-3
max_iters = 3000
lr_decay_iters = 3000
min_lr = 2e-4
warmup_iters = 100
beta2 = 0.99
eval_interval = 250
eval_iters = 20
log_interval = 50
wandb_project = "posgpt"
