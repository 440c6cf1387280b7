from configs.tasks.base import *  # noqa: F401,F403

task = "addition"
out_dir = "out-task-addition"
