# The headline comparison, `python compare.py configs/compare.py`: every encoding of the registry
# trained on the same data, model shape, seeds, token budget and schedule at a training length of
# L = 256 (where YaRN's thresholds mean something: RoPE's fastest pair turns L/2pi ~ 41 times in L,
# past beta_fast = 32), then evaluated from 1x to 16x L; every RoPE extension method on RoPE and
# xPos, without fine-tuning and after the papers' short fine-tune at 4L (and the
# "direct" fine-tune without scaling, PI's control); 3 seeds. Two runs side by side with one thread
# each on a 2-core CPU. Measured wall time: benchmarks/history.md.
# Any key can be changed on the command line: --only=rope,alibi --seeds=1 --finetune_iters=0.
from configs.base import *  # the shared training recipe (data, model shape 4 x 4 x 128, optimiser)

# ---- what is compared (keys of compare.py) --------------------------------------------
encodings = "all"             # "all": every key of positional.REGISTRY (new encodings join automatically)
seeds = 3                     # runs per encoding, with seeds seed, seed+1, ...; the report shows mean ± std
out_root = "out-compare"      # one folder per run: out-compare/<encoding>-s<seed>
report_dir = ""               # "": out_root/report
jobs = 2                      # runs side by side ...
threads = 1                   # ... with one thread each (faster than one run on 2 threads for this size)

# ---- training: config.Config keys shared by every run ---------------------------------
block_size = 256              # L
batch_size = 8                # 2,048 tokens per iteration
max_iters = 500               # 1.02M tokens per run
lr_decay_iters = 500
warmup_iters = 50
eval_interval = 50            # points of the validation-loss-against-tokens curve
eval_iters = 10
log_interval = 25
wandb_log = False             # True: every run (and its length evaluation) in one wandb group
wandb_group = ""              # "": "compare-<out_root>"

# ---- evaluation past the training length (evaluation.evaluate_checkpoint) -------------
eval_lengths = [256, 512, 1024, 2048, 4096]
eval_tokens = 8192            # tokens scored per (run, length) point: the same tokens at every length
eval_mode = "nonoverlap"      # or "sliding" (see evaluate.py)
# RoPE extension methods, evaluated on the runs of every encoding that accepts them
# (positional.scaling_problem: the rotary encodings), at factor s = rope_factor
rope_scalings = ["linear", "ntk", "dynamic", "ntk_by_parts", "yarn", "llama3", "rerope", "leaky_rerope"]
rope_factor = 4.0             # s: the methods target 4L = 1024 tokens

# ---- the papers' fine-tuning protocol -------------------------------------------------
finetune_iters = 100          # PI fine-tunes ~1000 steps, YaRN 400; scaled to this model's 500-step pretraining
finetune_factor = 4.0         # at s L = 1024 tokens, batch_size / s sequences: the same tokens per iteration
scaled_encodings = ["rope", "xpos"]   # the encodings evaluated and fine-tuned with every method ([]: all that take them)
finetune_longlora = True      # and LongLoRA's fine-tune (PI, LoRA r=8 on qkv/proj + embeddings + norms, S²-Attn)

# ---- does the model use the longer context? (context_use.py) ---------------------------
context_use = True            # context gain, per-position loss and in-range curve of every run as trained, plus:
context_labels = ["rope+ntk", "rope+yarn", "rope+leaky_rerope", "rope+direct ft", "rope+linear ft", "rope+yarn ft",
                  "rope+longlora ft"]
context_tokens = 2048         # targets scored per context length (16 windows of stride L/2)
context_sequences = 8         # sequences of 16 L averaged by the per-position loss
context_targets = 512         # targets of the in-range curve, each scored by a window of c tokens per context c
context_reference = "rope"    # also trained at finetune_factor x L = 1024 on the same tokens: the reference for
                              # context gain past L (--context_reference="": skip it)
