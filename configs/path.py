# Char-level Shakespeare with PaTH attention (data-dependent Householder transforms; positional/path.py);
# the recipe is configs/base.py.
from configs.base import *

pos_encoding = "path"
out_dir = "out-path"
