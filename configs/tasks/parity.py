from configs.tasks.base import *  # noqa: F401,F403

task = "parity"
out_dir = "out-task-parity"
