# The headline on a 2-core CPU, `python compare.py configs/compare_cpu.py`: configs/compare.py's recipe (L = 256,
# 12.3M tokens a run, 3 seeds, 65,536 evaluation targets at 1x to 16x L) for the encodings a CPU can train in a
# few hours: NoPE, the two absolute encodings, RoPE and two biases, plus RoPE trained at 4L (the reference for
# context gain past L). Every RoPE method is evaluated on RoPE without training; the fine-tune sweep (0.1% to 20%
# of the pretraining tokens) runs direct, PI, NTK and YaRN, the four of PI's Table 4 and YaRN's comparisons.
# Left out here, kept in configs/compare.py: xPos and the other encodings, the other methods' fine-tunes, LongLoRA.
# Two runs side by side with one thread each; it resumes where it stopped. Wall time: docs/results.md.
from configs.compare import *  # noqa: F401,F403

encodings = ["none", "learned", "sinusoidal", "rope", "alibi", "t5"]
scaled_encodings = ["rope"]
finetune_methods = ["linear", "ntk", "yarn"]   # and "direct"
finetune_longlora = False
context_labels = ["rope+ntk", "rope+yarn", "rope+leaky_rerope"] + [f"rope+{m} ft{finetune_iters[-1]}" for m in (
    "direct", "linear", "yarn")]
# the retrieval probe costs ~9 min a model on one thread, 13 models a seed (7 runs, 6 context_labels): turn it on
# with --retrieval_probe=True (the kept runs are measured from their checkpoints, not trained again)
retrieval_probe = False
out_root = "out-compare-cpu"
report_dir = "reports/compare-cpu"
