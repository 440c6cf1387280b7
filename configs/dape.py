# Char-level Shakespeare with the "dape" positional encoding (DAPE-Kerple); the recipe is configs/base.py.
from configs.base import *

pos_encoding = "dape"
out_dir = "out-dape"
