# The 2-D lookup (tasks/grid.py) with NoPE, RoPE and 2-D RoPE (grid_width 8, the grid's columns),
# trained at lengths <= 64 (8-column grids up to 7 rows), scored at 64 and 128 (taller grids) and
# 256, 512 (16 columns: 2-D RoPE still reads 8, its evaluate.py --grid_width=16 run reads 16):
#   python compare.py configs/tasks/grid_compare.py --report_dir=reports/tasks-grid
# One seed, sized for a shared 2-core CPU (docs/tasks.md has its measured time).
from configs.tasks.base import *  # noqa: F401,F403

block_size = 64               # the training length: 8-column grids up to 7 rows

suite = "tasks"               # compare.py's task suite: accuracy against length
tasks = ["grid"]
encodings = ["none", "rope", "rope_2d"]
variants = {"rope_2d": {"pos_encoding": "rope_2d", "grid_width": 8}}   # the runs named rope_2d read 8 columns
seeds = 1
jobs = 2
out_root = "out-tasks-grid"
samples = 100
multiples = [1, 2, 4, 8]
