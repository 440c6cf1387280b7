# Char-level Shakespeare with the "comrope" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "comrope"
out_dir = "out-comrope"
