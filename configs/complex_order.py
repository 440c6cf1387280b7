# Char-level Shakespeare with the "complex_order" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "complex_order"
out_dir = "out-complex_order"
