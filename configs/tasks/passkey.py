from configs.tasks.base import *  # noqa: F401,F403

task = "passkey"
out_dir = "out-task-passkey"
