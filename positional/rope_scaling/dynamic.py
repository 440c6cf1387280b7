"""Dynamic NTK scaling (emozilla, reddit r/LocalLLaMA, "Dynamically Scaled RoPE further
increases performance of long context LLaMA with zero fine-tuning", July 2023; the form
used by Hugging Face transformers' "dynamic" rope type).

The NTK-aware base is recomputed from the current sequence length n, so nothing changes
while the text fits the original length L:

    n <= L:  theta' = theta                                     (plain RoPE, exactly)
    n >  L:  b' = b * (s * n / L - (s - 1))^(d / (d - 2)),  theta'_j = b'^(-2j / d)

At n = L the bracket is 1, so the base grows continuously from b. Attention scale 1.
Keys are cached *before* rotation and re-rotated at every step (length_dependent); values of layers
above the first keep their own step's length, as in every implementation (a decode step equals a
recompute exactly for one layer only: tests/test_rope_scaling.py).
"""
from .base import ScalingSettings
from .ntk import ntk_factor


class DynamicSettings(ScalingSettings):
    length_dependent = True


def dynamic(inv_freq, s: DynamicSettings, *, base, seq_len=0):
    L = s.rope_original_max_position
    if seq_len <= L:
        return inv_freq, 1.0
    return ntk_factor(inv_freq, s.rope_factor * seq_len / L - (s.rope_factor - 1)), 1.0
