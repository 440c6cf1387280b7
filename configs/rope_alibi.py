# Char-level Shakespeare with RoPE and ALiBi in the same layers (any "a+b" combines); the recipe is configs/base.py.
from configs.base import *

pos_encoding = "rope+alibi"
out_dir = "out-rope_alibi"
