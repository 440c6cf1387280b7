# The 2-D lookup (tasks/grid.py): 6-column grids of up to 9 rows in training (L = 64), scored on
# taller (128 tokens) and then wider grids (12 columns from 144). 2-D RoPE needs the grid's width:
#   python train.py configs/tasks/grid.py --pos_encoding=rope_2d --grid_width=6 --out_dir=out-task-grid
#   python evaluate.py out-task-grid --lengths=256,512 --grid_width=12   # 12-column grids, read as such
from configs.tasks.base import *  # noqa: F401,F403

task = "grid"
block_size = 64
out_dir = "out-task-grid"
