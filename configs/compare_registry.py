# The whole registry at the CPU headline's recipe (issue #50), `python compare.py configs/compare_registry.py`:
# every registered encoding, the combination rope+alibi and the 2024-2026 variants below, 3 seeds each, on
# configs/compare_cpu.py's recipe (L = 256, 3,000 iterations of 4,096 tokens: 12.3M tokens a run; the same 65,536
# evaluation targets at 1x to 16x L), each scored with the retrieval probe as well as by perplexity. RoPE and xPos get
# every RoPE method, and the headline's fine-tune sweep (direct, PI, NTK, YaRN at 0.1% to 20% of the pretraining
# tokens); RoPE trained at 4L is the reference for context gain past L.
# Its runs are planned seed by seed (every encoding of seed 1337 first), so an interrupted comparison reports whole
# seeds. It resumes: a run kept in report_dir/runs is not trained again. Keep the checkpoints outside the repository:
#   nice -n 19 python compare.py configs/compare_registry.py --out_root=/path/outside/the/checkout
# and commit report_dir/runs/<run>/result.json.gz as each run lands (the probe and later evaluations read the
# checkpoints, so keep out_root too). Cost on the 2-core Xeon: ~16 min of training a run on one quiet thread,
# plus its evaluation and ~9 min of probe a model (docs/comparison.md#retrieval-probe).
from configs.compare_cpu import *  # noqa: F401,F403  the recipe, evaluation and fine-tune sweep of the headline

variants = {   # configs/compare_variants.py's, now at the headline recipe
    "rope_qknorm": {"pos_encoding": "rope", "qk_norm": True},
    "rope_ssmax": {"pos_encoding": "rope", "ssmax": True},
    "rope_pose": {"pos_encoding": "rope", "position_sampling": "pose", "max_position": 1024},
    "learned_randomized": {"pos_encoding": "learned", "position_sampling": "randomized", "max_position": 4096},
    "llama4_nope": {"pos_encoding": "rope", "layer_encodings": "rope,rope,rope,none"},
    "rnope": {"pos_encoding": "rope", "layer_encodings": "rope,none", "layer_windows": "64,0"},
    "local_global": {"pos_encoding": "rope", "layer_windows": "64,64,64,0"},
    # NoPE at twice the budget (24.6M tokens): at 12.3M it is still worse than the 4-gram at L, its loss falling
    # (reports/compare-cpu); issue #50 asks for a budget where it learns
    "none_2x": {"pos_encoding": "none", "max_iters": 6000, "lr_decay_iters": 6000},
}
encodings = ["all"]                    # every key of positional.REGISTRY, then the variants
scaled_encodings = ["rope", "xpos"]    # every RoPE method, and the fine-tune sweep, on both
retrieval_probe = True
out_root = "out-registry"
report_dir = "reports/registry"
