"""NoPE: no positional signal at all; order comes only from the causal mask.

Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization
in Transformers" (https://arxiv.org/abs/2305.19466): a causal decoder can infer
positions from the mask alone. Every hook keeps the base class's no-op default.
"""
from .base import PositionalEncoding


class NoPE(PositionalEncoding):
    name = "none"
