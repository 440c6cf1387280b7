# Char-level Shakespeare with RoPE whose frequencies are learned (theta_i * exp(alpha_i));
# the recipe is configs/base.py.
from configs.base import *

pos_encoding = "rope_learned_freq"
out_dir = "out-rope_learned_freq"
