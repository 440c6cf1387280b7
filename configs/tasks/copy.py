from configs.tasks.base import *  # noqa: F401,F403

task = "copy"
out_dir = "out-task-copy"
