from configs.tasks.base import *  # noqa: F401,F403

task = "duplicate"
out_dir = "out-task-duplicate"
