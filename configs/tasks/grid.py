# The 2-D lookup (tasks/grid.py): 8-column grids up to 7 rows in training (L = 64), scored on
# taller and then wider grids. 2-D RoPE needs the grid's width:
#   python train.py configs/tasks/grid.py --pos_encoding=rope_2d --grid_width=8 --out_dir=out-task-grid
#   python evaluate.py out-task-grid --lengths=256,512 --grid_width=16   # 16-column grids, read as such
from configs.tasks.base import *  # noqa: F401,F403

task = "grid"
block_size = 64
out_dir = "out-task-grid"
