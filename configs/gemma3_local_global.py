# Gemma 3's local/global attention (Gemma Team 2025, "Gemma 3 Technical Report", arXiv:2503.19786): sliding-window
# local layers with RoPE base 10,000 and global layers with base 1,000,000, a per-layer setting (a variant entry
# of layer_encodings, docs/encodings.md). Gemma 3 has 5 local layers to 1 global (window 1024); base.py's 4 layers
# allow 3:1, as configs/local_global.py, from which this differs only in the global layer's base. Gemma 3's
# long-context models also scale the global layers' RoPE alone (linear, factor 8), an entry of its own:
#     rope@rope_base=1e6@rope_scaling=linear@rope_factor=8
from configs.base import *

pos_encoding = "rope"                                   # the local layers: rope_base 10000, the default
layer_encodings = "rope,rope,rope,rope@rope_base=1e6"   # the global layer: its own base
layer_windows = "32,32,32,0"
out_dir = "out-gemma3_local_global"
