# Llama 4's per-layer pattern ("iRoPE", Meta 2025): RoPE on three layers, NoPE (no positional
# signal, global attention) on every 4th. configs/base.py has 4 layers: one period.
from configs.base import *

pos_encoding = "rope"                         # the main encoding (settings, rope_scaling, reports)
layer_encodings = "rope,rope,rope,none"
out_dir = "out-llama4_nope"
