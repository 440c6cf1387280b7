# Retrieval by key-query distance (issue #49): does an encoding use the context past the training length L? passkey
# and MQAR, each answer scored by the distance from the value it copies to the token that predicts it, in bins of L
# from [0, L/4) to [8L, 16L), at every scored length (1-16 L), on examples drawn to cover the bins evenly
# (tasks/score.py by_distance); the report's "Retrieval by distance" shows the runs learned at L (docs/tasks.md):
#   python compare.py configs/tasks/distance.py
# Five encodings x 3 seeds on each task's recipe (configs/tasks/passkey.py, mqar.py): 30 runs. The runs' folders are
# the full suite's (out-tasks), so its checkpoints, where they are on this machine, are scored, not trained again.
# A tiny version of the whole path (nothing learned: the section then says so):
#   python compare.py configs/tasks/distance.py --task_recipes={} --max_iters=20 --samples=8 --seeds=1 \
#       --out_root=out-tasks-distance-tiny --report_dir=out-tasks-distance-tiny/report
from configs.tasks.compare import *  # noqa: F401,F403

tasks = ["passkey", "mqar"]
variants = {}
encodings = ["none", "rope", "alibi", "t5", "learned"]
seeds = 3
task_distance = True
out_root = "out-tasks"
report_dir = "reports/tasks-distance"
