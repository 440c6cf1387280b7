# Issue #51's additions at the quick recipe of reports/compare (configs/compare_quick.py: L = 256, 500 iterations
# of 2,048 tokens, 8,192 targets per point at 1x to 16x L, seeds 1337...), beside RoPE trained again by today's
# code: `python compare.py configs/compare_new.py`. reports/compare keeps no runs (an older compare.py wrote it,
# before measure/kept.py) and a report holds the runs of its own call, so the additions have a report of their own:
# HoPE, ComRoPE, stick-breaking, PaTH and DAPE as trained; STRING and LongRoPE (no searched factors: the attention
# factor alone) with the other RoPE methods on RoPE; DroPE's fine-tune beside PI's and the direct one, at 20% of the
# tokens.
# Context use and the retrieval probe are left out (minutes a model for PaTH and DAPE on a CPU); it resumes.
from configs.compare_quick import *  # noqa: F401,F403

encodings = ["rope", "hope", "comrope", "stick_breaking", "path", "dape"]   # cheapest first
scaled_encodings = ["rope"]
rope_scalings = rope_scalings + ["longrope", "string"]  # noqa: F405
eval_tokens = 8192                  # reports/compare's targets per point
finetune_iters = [100]              # 20% of the pretraining tokens, configs/compare_quick.py's largest budget
finetune_methods = ["linear", "drope"]   # PI and DroPE, and "direct" (PI's control); drope alone: direct and DroPE only
finetune_longlora = False
context_use = False
context_labels = []
context_reference = ""
retrieval_probe = False
jobs = 1
out_root = "out-compare-new"
report_dir = "reports/compare-new"
