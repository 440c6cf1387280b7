# Char-level Shakespeare with the "cope" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "cope"
out_dir = "out-cope"
