# Char-level Shakespeare with the "rope" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "rope"
out_dir = "out-rope"
