# Char-level Shakespeare with the "none" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "none"
out_dir = "out-nope"
