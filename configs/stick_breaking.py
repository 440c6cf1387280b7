# Char-level Shakespeare with stick-breaking attention (no position signal; positional/stick_breaking.py);
# the recipe is configs/base.py.
from configs.base import *

pos_encoding = "stick_breaking"
out_dir = "out-stick_breaking"
