# The 2024-2026 model and training options of issue #13 that are not encodings of their own,
# compared on the quick recipe of its committed report (configs/compare_quick.py: L = 256, 500 iterations)
# against `rope` and `none` trained in the same out_root.
#   python compare.py configs/compare_variants.py
# A variant is a name and the training keys that make it (any key of config.py).
from configs.compare_quick import *  # the recipe of its committed report

variants = {
    "rope_qknorm": {"pos_encoding": "rope", "qk_norm": True},              # RMS-normalised q, k per head
    "rope_ssmax": {"pos_encoding": "rope", "ssmax": True},                 # Scalable-Softmax (Nakanishi 2025)
    "rope_pose": {"pos_encoding": "rope", "position_sampling": "pose", "max_position": 1024},   # PoSE, target 4L
    "learned_randomized": {"pos_encoding": "learned", "position_sampling": "randomized", "max_position": 4096},
    "llama4_nope": {"pos_encoding": "rope", "layer_encodings": "rope,rope,rope,none"},      # iRoPE's pattern
    "rnope": {"pos_encoding": "rope", "layer_encodings": "rope,none", "layer_windows": "64,0"},   # Yang et al. 2025
    "local_global": {"pos_encoding": "rope", "layer_windows": "64,64,64,0"},                # Gemma-style
}
only = "none,rope," + ",".join(variants)
seeds = 1                     # one seed (1337) each: 3 would take about three times as long
report_dir = "reports/compare-variants"
