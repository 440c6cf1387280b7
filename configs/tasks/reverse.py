from configs.tasks.base import *  # noqa: F401,F403

task = "reverse"
out_dir = "out-task-reverse"
