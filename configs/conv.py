# Char-level Shakespeare with the "conv" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "conv"
out_dir = "out-conv"
