# The comparison run by `python compare.py configs/compare.py`: every encoding trained on the
# same data, model shape, seed, token budget and schedule, then evaluated past the training
# length. Sized for 2 CPU cores: the 11 encodings of the registry x 1M tokens in roughly
# 35 minutes in all (about 3 minutes a run, measured with other jobs sharing the cores).
# Any key can be changed on the command line: --only=rope,alibi --seeds=3 --max_iters=300.
from configs.base import *  # the shared training recipe (data, model shape, optimiser)

# ---- what is compared (keys of compare.py) --------------------------------------------
encodings = "all"             # "all": every key of positional.REGISTRY (new encodings join automatically)
seeds = 1                     # runs per encoding, with seeds seed, seed+1, ...; the report shows mean ± std
out_root = "out-compare"      # one folder per run: out-compare/<encoding>-s<seed>
report_dir = ""               # "": out_root/report

# ---- training: config.Config keys shared by every run ---------------------------------
block_size = 64               # short training context, so that 4x-16x extrapolation stays cheap to evaluate
batch_size = 32               # 2,048 tokens per iteration
max_iters = 500               # 1.02M tokens per run
lr_decay_iters = 500
warmup_iters = 50
eval_interval = 50            # points of the validation-loss-against-tokens curve
eval_iters = 10
log_interval = 25
wandb_log = False             # True: every run (and its length evaluation) in one wandb group
wandb_group = ""              # "": "compare-<out_root>"

# ---- evaluation past the training length (evaluation.evaluate_checkpoint) -------------
eval_lengths = [64, 128, 256, 512, 1024]
eval_tokens = 8192            # tokens scored per (run, length) point
eval_mode = "nonoverlap"      # or "sliding" (see evaluate.py)
# RoPE extension methods, evaluated (no retraining) on the runs of every encoding that
# accepts it (positional.scaling_problem: the rotary encodings)
rope_scalings = ["linear", "ntk", "yarn"]
rope_factor = 0.0             # 0: max(eval_lengths) / block_size
