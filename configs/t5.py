# Char-level Shakespeare with the "t5" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "t5"
out_dir = "out-t5"
