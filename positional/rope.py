"""RoPE: rotary position embeddings (Su et al. 2021, "RoFormer",
https://arxiv.org/abs/2104.09864).

Each pair of query/key channels is rotated by an angle proportional to the position:

    theta_j = base^(-2j / d),  j = 0 .. d/2 - 1           (d = rotary dim)
    (x_j, x_{j+d/2}) at position m  ->  rotated by m * theta_j

so q_m . k_n depends on m - n only. Pairing convention: half-split (GPT-NeoX / HF
`rotate_half`): channel j is paired with channel j + d/2, not with j + 1 as in Meta's
interleaved layout; the two are incompatible, checkpoints do not transfer between them.

Knobs: base (rope_base), and the rotary fraction of the head dim (partial rotary, as in
GPT-NeoX's rotary_pct): only the first d = fraction * head_dim channels are rotated.
Angles are computed in float32 (or float64 for the tables) and cast at the end; never
complex numbers. Keys are cached after rotation (cheap).
"""
import torch

from .base import PositionalEncoding


def rope_inv_freq(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """(head_dim // 2,) inverse frequencies theta_j = base^(-2j / head_dim)."""
    if head_dim % 2:
        raise ValueError(f"rotary dimension must be even, got {head_dim}; change rotary_fraction or n_embd/n_head")
    return base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)


def rotate_half_split(x, cos, sin):
    """Rotate the first 2*cos.shape[-1] channels of x (half-split pairs), pass the rest.
    x: (B, H, T, D); cos, sin: (T, r/2) -> (B, H, T, D)."""
    r2 = cos.shape[-1]
    x1, x2, rest = x[..., :r2], x[..., r2:2 * r2], x[..., 2 * r2:]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    out = (x1 * cos - x2 * sin, x2 * cos + x1 * sin)
    return torch.cat(out + (rest,), dim=-1) if rest.shape[-1] else torch.cat(out, dim=-1)


class RoPE(PositionalEncoding):
    name = "rope"

    def __init__(self, head_dim: int, rotary_fraction: float = 1.0, base: float = 10000.0):
        super().__init__()
        self.rotary_dim = int(round(head_dim * rotary_fraction))
        if not 0 < self.rotary_dim <= head_dim or self.rotary_dim % 2:
            raise ValueError(f"rotary dimension must be even and in (0, head_dim={head_dim}], got "
                             f"{self.rotary_dim} (= rotary_fraction {rotary_fraction} * head_dim); "
                             f"change rotary_fraction or n_embd/n_head")
        self.base = base
        self.register_buffer("inv_freq", rope_inv_freq(self.rotary_dim, base), persistent=False)
        self.n_cached = 0
        self.register_buffer("cos", torch.empty(0, self.rotary_dim // 2), persistent=False)
        self.register_buffer("sin", torch.empty(0, self.rotary_dim // 2), persistent=False)

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.n_embd // cfg.n_head, cfg.rotary_fraction, cfg.rope_base)

    def angles(self, positions):
        """(T, r/2) float64 angles m * theta_j."""
        return positions.to(torch.float64)[:, None] * self.inv_freq.to(torch.float64)

    def set_length(self, n_positions):
        if n_positions > self.n_cached:  # tables grow on the host, never inside rotate
            n = max(n_positions, 2 * self.n_cached)
            a = self.angles(torch.arange(n, device=self.inv_freq.device))
            self.cos, self.sin = a.cos().float(), a.sin().float()
            self.n_cached = n

    def tables(self, pos, is_key):
        return self.cos[pos], self.sin[pos]                      # (T, r/2) each

    def rotate(self, x, pos, is_key=False):
        cos, sin = self.tables(pos, is_key)
        return rotate_half_split(x, cos, sin)
