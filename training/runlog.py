"""What a training run records besides its checkpoint: out_dir/log.jsonl (a JSON object a line,
read by measure/compare_report.py) and, with --wandb_log=True, a wandb run whose id the checkpoint
keeps, so that a resume continues it. Rank 0 alone records."""
import json
import os
import time

from training.wandb_util import start_wandb

WANDB_NAMES = {"train_loss": "train/loss", "val_loss": "val/loss", "val_bpb": "val/bits_per_byte",
               "loss": "train/loss_step"}   # log.jsonl's name -> wandb's, where they differ


class RunLog:
    def __init__(self, cfg, master, wandb_id=None):
        self.run = start_wandb(cfg, run_id=wandb_id) if cfg.wandb_log and master else None
        append = cfg.init_from == "resume" or cfg.eval_only  # a resumed run continues its log
        self.file = open(os.path.join(cfg.out_dir, "log.jsonl"), "a" if append else "w") if master else None
        self.t_start = time.time()  # training starts now: elapsed and the "done" time count from here

    def __call__(self, event, **row):
        """One row of log.jsonl (None values left out), with the seconds since training started;
        eval and train rows are logged to wandb too."""
        row = {k: v for k, v in row.items() if v is not None}
        if self.file:
            self.file.write(json.dumps(dict(event=event, **row, elapsed=round(time.time() - self.t_start, 3))) + "\n")
            self.file.flush()
        if self.run and event in ("eval", "train"):
            self.run.log({WANDB_NAMES.get(k, k): v for k, v in row.items()}, step=row["iter"])

    def close(self, code, best_val, skipped):
        if self.file:
            self.file.close()
        if self.run:
            self.run.summary.update({"best_val_loss": best_val, "nonfinite_skipped": skipped})
            self.run.finish(exit_code=code)
