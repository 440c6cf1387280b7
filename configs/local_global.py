# Gemma-style local/global attention: RoPE everywhere, three sliding-window (local) layers to
# one global layer. Gemma 2 alternates 1:1 and Gemma 3 uses 5:1; base.py's 4 layers allow 3:1.
from configs.base import *

pos_encoding = "rope"
layer_windows = "32,32,32,0"
out_dir = "out-local_global"
