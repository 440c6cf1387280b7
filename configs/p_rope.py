# Char-level Shakespeare with the "p_rope" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "p_rope"
out_dir = "out-p_rope"
