# The headline comparison for machines with a GPU, `python compare.py configs/compare.py`: every encoding of
# the registry trained on the same data, model shape, seeds, token budget and schedule at a training length of
# L = 256 (where YaRN's thresholds mean something: RoPE's fastest pair turns L/2pi ~ 41 times in L,
# past beta_fast = 32), then evaluated from 1x to 16x L; every RoPE extension method on RoPE and
# xPos, without fine-tuning and after fine-tunes at 4L of 0.1% to 20% of the pretraining tokens (and the
# "direct" fine-tune without scaling, PI's control, at the same budgets); 3 seeds. The recipe is configs/rope.py's
# (4 x 4 x 128, 3,000 iterations of 4,096 tokens: 12.3M tokens) at L = 256, so that the models learn their
# training distribution before they are measured past it: configs/rope.py beats the count 5-gram.
# On a 2-core CPU run configs/compare_cpu.py (the same recipe, the encoding set cut to what fits).
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
batch_size = 16               # 4,096 tokens per iteration, as configs/rope.py (32 x 128)
max_iters = 3000              # 12.3M tokens per run (configs/base.py's schedule: lr 2e-3 to 2e-4, 100 warm-up)
wandb_log = False             # True: every run (and its length evaluation) in one wandb group
wandb_group = ""              # "": "compare-<out_root>"

# ---- evaluation past the training length (evaluation.evaluate_checkpoint) -------------
eval_lengths = [256, 512, 1024, 2048, 4096]
eval_tokens = 65536           # targets scored per (run, length) point: 16 chunks of 4096 spread over the val split,
                              # the same targets at every length (cost: docs/comparison.md#evaluation)
eval_mode = "nonoverlap"      # or "sliding" (see evaluate.py)
# RoPE extension methods, evaluated on the runs of every encoding that accepts them
# (positional.scaling_problem: the rotary encodings), at factor s = rope_factor
rope_scalings = ["linear", "ntk", "dynamic", "ntk_by_parts", "yarn", "llama3", "rerope", "leaky_rerope"]
rope_factor = 4.0             # s: the methods target 4L = 1024 tokens
# Dynamic NTK at factor 1, not s. Its base at length T is b (s T / L - (s - 1))^(d/(d-2)) (Hugging Face's
# _compute_dynamic_ntk_parameters, which ours matches), i.e. NTK-aware scaling by alpha(T) = s T / L - (s - 1):
# at s = 4 that is 13 at the target 4L and 61 at 16L, three to four times the static methods' s. At s = 1,
# alpha(T) = T / L: the YaRN paper's Dynamic NTK (section 3.3, s = max(1, l'/L)), which is plain RoPE up to L
# and equals static NTK x4 at the target 4L. The report's "effective scale" table shows both per length.
rope_factors = {"dynamic": 1.0}

# ---- the papers' fine-tuning protocol -------------------------------------------------
finetune_factor = 4.0         # at s L = 1024 tokens, batch_size / s sequences: the same tokens per iteration
# budgets of 0.1%, 1%, 5% and 20% of the pretraining tokens (an iteration holds the same tokens at s L), one label
# each ("rope+yarn ft600"); one fine-tune per method observed at each budget. PI fine-tunes LLaMA ~1000 steps at the
# target length, YaRN Llama 2 400 steps of 64 x 64k tokens: ~0.1% of their pretraining tokens or less.
finetune_iters = [max(1, round(p * max_iters)) for p in (0.001, 0.01, 0.05, 0.2)]   # [3, 30, 150, 600]
# the encodings evaluated and fine-tuned with every method ([]: all that take them)
scaled_encodings = ["rope", "xpos"]
finetune_longlora = True      # and LongLoRA's fine-tune (PI, LoRA r=8 on qkv/proj + embeddings + norms, S²-Attn)

# ---- does the model use the longer context? (context_use.py) ---------------------------
context_use = True            # context gain, per-position loss and in-range curve of every run as trained, plus:
context_labels = ["rope+ntk", "rope+yarn", "rope+leaky_rerope"] + [f"rope+{m} ft{finetune_iters[-1]}" for m in (
    "direct", "linear", "yarn", "longlora")]
context_tokens = 2048         # targets scored per context length (16 windows of stride L/2)
context_sequences = 8         # sequences of 16 L averaged by the per-position loss
context_targets = 512         # targets of the in-range curve, each scored by a window of c tokens per context c
context_reference = "rope"    # also trained at finetune_factor x L = 1024 on the same tokens: the reference for
                              # context gain past L (--context_reference="": skip it)

# ---- does the model use a span seen d tokens back? (measure/retrieval_probe.py) ---------
# Each run as trained and each of context_labels, at d = L/4 .. 16L, probe_spans windows per distance (paired across
# seeds and encodings). Cost: ~9 min per model at 128 windows on one busy Xeon thread, mostly the 16L windows; seconds
# on a GPU. Turned on later, it measures the kept runs from their checkpoints without training them again.
retrieval_probe = True
probe_spans = 128             # windows per distance
