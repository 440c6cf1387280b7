# Char-level Shakespeare with the "sinusoidal" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "sinusoidal"
out_dir = "out-sinusoidal"
