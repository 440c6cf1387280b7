# Position coupling (positional/coupling.py) on the addition task, whose places (tasks/addition.py) it reads; on a
# dataset of text every token would take the table's row 0 (NoPE). The recipe is configs/tasks/addition.py's.
#   python train.py configs/coupling.py --out_dir=out-task-addition-coupling
#   python evaluate.py out-task-addition-coupling        # exact match at 1-16x the training length
from configs.tasks.addition import *  # noqa: F401,F403

pos_encoding = "coupling"
out_dir = "out-task-addition-coupling"
