# RNoPE-SWA (Yang et al. 2025, "Rope to Nope and Back Again: A New Hybrid Attention Strategy",
# arXiv:2501.18795): RoPE layers that attend within a sliding window, interleaved with global
# NoPE layers. The window here is a quarter of block_size (128).
from configs.base import *

pos_encoding = "rope"
layer_encodings = "rope,none"
layer_windows = "32,0"
out_dir = "out-rnope"
