from configs.tasks.base import *  # noqa: F401,F403

task = "mqar"
out_dir = "out-task-mqar"
