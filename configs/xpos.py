# Char-level Shakespeare with the "xpos" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "xpos"
out_dir = "out-xpos"
