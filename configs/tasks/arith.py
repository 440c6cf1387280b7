# Places of digits on addition (#51): Abacus embeddings and position coupling (positional/abacus.py, coupling.py)
# against the task suite's other encodings, on addition's recipe (configs/tasks/addition.py), scored at 1-16x L with
# 200 samples per point (docs/tasks.md, "Places of digits"). Its settings are configs/tasks/compare.py's, so the
# suite's kept addition runs (reports/tasks-suite/runs/addition-*) count here as they are: copied into report_dir,
# only abacus and coupling train:
#   mkdir -p reports/tasks-arith/runs && cp -r reports/tasks-suite/runs/addition-* reports/tasks-arith/runs/
#   python compare.py configs/tasks/arith.py --out_root=/work/out/arith
from configs.tasks.compare import *  # noqa: F401,F403

tasks = ["addition"]
encodings = [*encodings, "abacus", "coupling"]   # noqa: F405
out_root = "out-tasks-arith"
report_dir = "reports/tasks-arith"
