"""What a training run records besides its checkpoint: out_dir/log.jsonl (one JSON object a
line; compare.py reads it) and, with --wandb_log=True, a wandb run, whose id the checkpoint
keeps so that a resume continues it. Rank 0 alone writes: on the other ranks a RunLog
records nothing."""
import json
import os
import time

from training.wandb_util import start_wandb


class RunLog:
    def __init__(self, cfg, master, wandb_id=None):
        """wandb_id: the run's id (kept in the checkpoint): a resume passes the same one and continues that run."""
        self.run = start_wandb(cfg, run_id=wandb_id) if cfg.wandb_log and master else None
        append = cfg.init_from == "resume" or cfg.eval_only  # a resumed run continues its log
        path = os.path.join(cfg.out_dir, "log.jsonl")
        self.file = open(path, "a" if append else "w") if master else None
        self.t_start = time.time()  # training starts now: log.jsonl's elapsed and the "done" time count from here

    def row(self, **row):
        """One line of log.jsonl, with the seconds since this process started training."""
        if self.file:
            self.file.write(json.dumps(dict(row, elapsed=round(time.time() - self.t_start, 3))) + "\n")
            self.file.flush()

    def eval(self, iter_num, tokens, losses, lr):
        bpb = {"val_bpb": losses["val_bpb"]} if losses.get("val_bpb") else {}
        self.row(event="eval", iter=iter_num, tokens=tokens, train_loss=losses["train"], val_loss=losses["val"], lr=lr,
                 **bpb)
        if self.run:
            self.run.log({"iter": iter_num, "train/loss": losses["train"], "val/loss": losses["val"], "lr": lr,
                          "tokens": tokens, **{"val/bits_per_byte": v for v in bpb.values()}}, step=iter_num)

    def train(self, iter_num, tokens, loss, lr, tokens_per_sec):
        self.row(event="train", iter=iter_num, tokens=tokens, loss=loss, lr=lr, tokens_per_sec=tokens_per_sec)
        if self.run:
            self.run.log({"iter": iter_num, "train/loss_step": loss, "lr": lr, "tokens_per_sec": tokens_per_sec},
                         step=iter_num)

    def close(self, code, best_val, skipped):
        if self.file:
            self.file.close()
        if self.run:
            self.run.summary["best_val_loss"] = best_val
            self.run.summary["nonfinite_skipped"] = skipped
            self.run.finish(exit_code=code)
