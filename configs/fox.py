# Char-level Shakespeare with the "fox" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "fox"
out_dir = "out-fox"
