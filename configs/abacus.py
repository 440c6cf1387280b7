# Abacus embeddings (positional/abacus.py) on the addition task, whose places (tasks/addition.py) they read; on a
# dataset of text every token would take the table's row 0 (NoPE). The recipe is configs/tasks/addition.py's.
#   python train.py configs/abacus.py --out_dir=out-task-addition-abacus
#   python evaluate.py out-task-addition-abacus          # exact match at 1-16x the training length
from configs.tasks.addition import *  # noqa: F401,F403

pos_encoding = "abacus"
out_dir = "out-task-addition-abacus"
