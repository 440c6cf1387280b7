# Char-level Shakespeare with the "transformer_xl" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "transformer_xl"
out_dir = "out-transformer_xl"
