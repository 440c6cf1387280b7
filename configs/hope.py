# Char-level Shakespeare with the "hope" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "hope"
out_dir = "out-hope"
