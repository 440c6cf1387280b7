# Char-level Shakespeare with the "fire" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "fire"
out_dir = "out-fire"
