# Char-level Shakespeare with 2-D (axial) RoPE; the recipe is configs/base.py. Text has no grid:
# grid_width 0 reads it as one row (docs/encodings.md); configs/tasks/grid.py sets a width.
from configs.base import *

pos_encoding = "rope_2d"
out_dir = "out-rope_2d"
