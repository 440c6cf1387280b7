# Char-level Shakespeare with the "kerple" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "kerple"
out_dir = "out-kerple"
