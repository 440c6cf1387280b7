# Char-level Shakespeare with the "floater" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "floater"
out_dir = "out-floater"
