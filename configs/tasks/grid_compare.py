# The 2-D lookup (tasks/grid.py) with NoPE, RoPE and 2-D RoPE (grid_width 6, the grid's columns),
# trained at lengths <= 64, scored at 64 and 128 (taller 6-column grids) and 256, 512 (12 columns:
# 2-D RoPE still reads 6 here; evaluate.py --grid_width=12 scores it reading 12, docs/tasks.md):
#   python compare.py configs/tasks/grid_compare.py --report_dir=reports/tasks-grid
# One seed, sized for a shared 2-core CPU (docs/tasks.md has its measured time).
from configs.tasks.base import *  # noqa: F401,F403

block_size = 64               # the training length: 6-column grids of up to 9 rows
suite = "tasks"               # compare.py's task suite: accuracy against length
tasks = ["grid"]
encodings = ["none", "rope", "rope_2d"]
variants = {"rope_2d": {"pos_encoding": "rope_2d", "grid_width": 6}}   # the runs named rope_2d read 6 columns
seeds = 1
jobs = 2
out_root = "out-tasks-grid"
samples = 100
max_iters = 600               # the base recipe's 800 cut for the shared CPU (2-D RoPE learns it by ~400: a pilot)
lr_decay_iters = 600
multiples = [1, 2, 4, 8]
