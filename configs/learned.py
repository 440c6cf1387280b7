# Char-level Shakespeare with the "learned" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "learned"
out_dir = "out-learned"
