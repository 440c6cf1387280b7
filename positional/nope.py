"""NoPE: no positional signal at all; order comes only from the causal mask.

Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization
in Transformers" (https://arxiv.org/abs/2305.19466): a causal decoder can infer
positions from the mask alone. Every hook keeps the base class's no-op default, except
one option of Llama 4's, off by default:

Llama 4's attention temperature tuning (Meta 2025, https://ai.meta.com/blog/llama-4-multimodal-intelligence/:
"iRoPE", NoPE on every 4th layer, with "inference time temperature scaling of attention"; the formula as
Hugging Face transformers 5.24.0 writes it, models/llama4/modeling_llama4.py, Llama4TextAttention.forward,
which cites SSMax, arXiv:2501.19399): the queries of the NoPE layers only, at position n, scaled by

    1 + attn_scale * log(1 + floor((n + 1) / floor_scale))         (Llama 4: 0.1 and 8192)

so nothing changes while n + 1 < floor_scale, and the logits sharpen slowly past it (x1.07 from
n + 1 = floor_scale, x1.11 from 2 floor_scale, x1.22 from 8). Settings: nope_attn_scale (0: off)
and nope_floor_scale. It is a setting of this encoding, not a model option as logn_scaling and
ssmax are (attention/temperature.py), because Llama 4 applies it where a layer has no positions: in a
per-layer schedule ("rope,rope,rope,none") the NoPE layers have it and the RoPE ones do not.
n is the query's position (ours restart at each document; Hugging Face counts the cached
tokens: the same without documents). Softmax attention only; tests/test_llama4_temperature.py
checks it against Hugging Face's Llama4TextAttention.
"""
from dataclasses import dataclass

import torch

from .base import PositionalEncoding, Settings, setting


@dataclass
class NoPESettings(Settings):
    nope_attn_scale: float = setting(0.0, at_least=0, why="0: off; Llama 4: 0.1")   # Llama 4's temperature
    nope_floor_scale: int = setting(8192, at_least=1)   # positions per step of the temperature's floor

    def check(self, cfg):
        super().check(cfg)
        if self.nope_attn_scale and cfg.attention != "softmax":
            raise ValueError(f"nope_attn_scale={self.nope_attn_scale} is a temperature of softmax attention; "
                             f"drop it or use attention=softmax")


def llama4_scale(pos, attn_scale, floor_scale):
    """(T,) float32 query scales 1 + attn_scale * log1p(floor((pos + 1) / floor_scale)) at positions pos."""
    return torch.log1p(torch.floor((pos.float() + 1.0) / floor_scale)) * attn_scale + 1.0


class NoPE(PositionalEncoding):
    name = "none"
    Settings = NoPESettings

    @classmethod
    def from_config(cls, cfg, s):
        """NoPE, or with nope_attn_scale its tempered form: the class itself keeps every no-op hook, so what is
        derived from its hooks (its family in the reports, what the attention may skip) stays NoPE's."""
        return Llama4Temperature(s.nope_attn_scale, s.nope_floor_scale) if s.nope_attn_scale else cls()


class Llama4Temperature(NoPE):
    """NoPE whose queries are scaled by Llama 4's temperature (the module docstring)."""

    def __init__(self, attn_scale, floor_scale):
        super().__init__()
        self.attn_scale, self.floor_scale = attn_scale, floor_scale

    def rotate(self, x, ctx, key=False):
        """Queries scaled by Llama 4's temperature at ctx.q_pos (x (B, H, T, D)); keys unchanged."""
        if key:
            return x
        return x * llama4_scale(ctx.q_pos, self.attn_scale, self.floor_scale).to(x.dtype)[:, None]   # (T, 1)
