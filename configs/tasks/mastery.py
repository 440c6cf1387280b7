# Tasks to mastery (#49 item 4): configs/tasks/compare.py's suite (every task x encoding x 3 seeds, each task on its
# recipe), each run trained until its exact match at L on 200 held-out examples reaches the report's bar, 95%,
# checked every 50 iterations, or until its recipe's max_iters, the cap (training/mastery.py). The report gives the
# iterations each took, or "not learned by" the cap, before any score past L (docs/tasks.md, "Tasks to mastery"):
#   python compare.py configs/tasks/mastery.py
# Not run yet (2026-12-03): its budget is the full suite's at most (a run stops early, none trains longer).
from configs.tasks.compare import *  # noqa: F401,F403

stop_at_mastery = 0.95        # = tasks/report.py's MASTERY, the bar a run needs to count as learned
mastery_samples = 200
eval_interval = 50            # the iterations to mastery are known to within this
out_root = "out-tasks-mastery"
report_dir = "reports/tasks-mastery"
