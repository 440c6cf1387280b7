# Char-level Shakespeare with the "shaw" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "shaw"
out_dir = "out-shaw"
