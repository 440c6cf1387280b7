# Byte-level Python source (data/python_code: the .py files of SymPy 1.13.3, 25.8 MB) with rope, at the
# size of configs/rope.py: the corpus where far context should pay (docs/data.md). Rows stream across
# files (documents="stream"): SymPy's files are ~50x longer than a row, and aligned rows would see
# only their first block_size bytes. Evaluate per file with: python evaluate.py out-code --documents=200
from configs.base import *

dataset = "python_code"
pos_encoding = "rope"
out_dir = "out-code"
