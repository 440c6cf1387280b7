# Char-level Shakespeare with the "resonance_rope" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "resonance_rope"
out_dir = "out-resonance_rope"
