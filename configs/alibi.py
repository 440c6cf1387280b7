# Char-level Shakespeare with the "alibi" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "alibi"
out_dir = "out-alibi"
