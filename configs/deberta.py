# Char-level Shakespeare with DeBERTa's disentangled attention; the recipe is configs/base.py.
from configs.base import *

pos_encoding = "deberta"
out_dir = "out-deberta"
