"""What compare.py runs: one run (runs.py), the fine-tune protocol (finetune.py), context use (context.py), and
the two suites, each with check, measure, result and report (lm_suite.py: perplexity against length;
task_suite.py: accuracy against length on tasks/)."""
