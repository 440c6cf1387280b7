# Char-level Shakespeare with the "rnn" positional encoding; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "rnn"
out_dir = "out-rnn"
