"""2-D (axial) RoPE: rotary embeddings of a position on a grid (Heo et al. 2024, "Rotary
Position Embedding for Vision Transformer", https://arxiv.org/abs/2403.13298, the axial form;
Su 2021, "Transformer upgrade road 4: rotary position embedding for 2-D positions",
https://kexue.fm/archives/8397).

A sequence read row by row from a grid of width W puts position p at (row, col) = divmod(p, W).
Half of each head's channel pairs turn with the row, the other half with the column, each half
with RoPE's frequencies over its own width:

    theta_j = base^(-2j / (D/2)),  j = 0 .. D/4 - 1
    pair (x_j, x_{j+D/2})          turned by row * theta_j        (j < D/4)
    pair (x_{j+D/4}, x_{j+3D/4})   turned by col * theta_j

so the rotation is R_(row, col) = R_row (+) R_col (block-diagonal: the Kronecker-sum form
R_h (x) R_w of the survey), and q . k depends on (row_q - row_k, col_q - col_k) only. Half-split
pairs as positional/rope.py (channel i with i + D/2); Heo et al. use base 100 and their own
channel order, a fixed permutation that the projections absorb.

Setting grid_width W is an evaluation-time key: a model trained on grids of width W is scored on
wider ones with --grid_width. W = 0 means no grid: one row (row 0, col = p), i.e. RoPE on the
column half of the pairs and no rotation on the row half. The positions stay 1-D in the model
(KV cache, windows and documents unchanged); rope_scaling's methods are defined for 1-D RoPE
and are not offered here.
"""
from dataclasses import dataclass

import torch

from .base import PositionalEncoding, Settings
from .rope import RoPE, rope_inv_freq


@dataclass
class RoPE2DSettings(Settings):
    rope_base: float = 10000.0      # theta_j = base^(-2j/(D/2)) on each axis
    grid_width: int = 0             # W: position p is at (row, col) = divmod(p, W); 0: one row

    def check(self, cfg):
        head_dim = cfg.n_embd // cfg.n_head
        if head_dim % 4:
            raise ValueError(f"rope_2d needs a head dim divisible by 4 (two axes of channel pairs), got {head_dim}; "
                             f"change n_embd/n_head")
        if self.grid_width < 0:
            raise ValueError(f"grid_width must be >= 0 (0: no grid, one row), got {self.grid_width}")
        if not self.rope_base > 1:
            raise ValueError(f"rope_base must be > 1, got {self.rope_base}")


class _Axial(RoPE):
    """RoPE's rotation (its training, inference and one-position paths) at a grid's angles."""

    def __init__(self, head_dim, base, grid_width):
        super().__init__(head_dim, 1.0, base)
        self.grid_width = grid_width
        self.inv_freq = rope_inv_freq(head_dim // 2, base)[0]         # (D/4,) the frequencies of each axis

    def grid(self, pos):
        """(row, col) of positions pos (T,): divmod(pos, W), or (0, pos) without a grid."""
        if not self.grid_width:
            return torch.zeros_like(pos), pos
        return pos // self.grid_width, pos % self.grid_width

    def angles(self, positions, inv_freq):
        """(T, D/2) float64: row angles, then column angles."""
        rc = torch.stack(self.grid(positions), -1).to(torch.float64)       # (T, 2)
        return (rc[:, :, None] * inv_freq.to(torch.float64)).flatten(1)   # (T, 2, D/4) -> (T, D/2)


class RoPE2D(PositionalEncoding):
    """Holds a RoPE rather than being one: positional.rotary offers rope_scaling to RoPE subclasses."""
    name = "rope_2d"
    Settings = RoPE2DSettings

    def __init__(self, head_dim, base=10000.0, grid_width=0):
        super().__init__()
        self.axial = _Axial(head_dim, base, grid_width)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_embd // cfg.n_head, s.rope_base, s.grid_width)

    def rotate(self, x, ctx, key=False):
        return self.axial.rotate(x, ctx, key)
