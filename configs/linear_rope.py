# Char-level Shakespeare, RoPE in causal linear attention (elu+1 features, RoFormer sec. 3.3);
# the recipe is configs/base.py. pos_encoding may be rope, xpos or none here.
from configs.base import *

pos_encoding = "rope"
attention = "linear"
out_dir = "out-linear-rope"
wandb_run_name = "linear-rope"
