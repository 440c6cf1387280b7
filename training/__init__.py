"""Running a model: configuration, the command line, checkpoints, the runtime (device, seeds, threads),
guards and logs."""
