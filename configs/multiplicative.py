# Char-level Shakespeare with the "multiplicative" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "multiplicative"
out_dir = "out-multiplicative"
