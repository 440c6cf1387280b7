"""ComRoPE: rotary embeddings by trainable commuting angle matrices (Yu et al. 2025, "ComRoPE: Scalable and
Robust Rotary Position Embedding Parameterized by Trainable Commuting Angle Matrices", CVPR 2025,
https://arxiv.org/abs/2506.03737; the authors' code: github.com/Longin-Yu/ComRoPE).

A position x = (x_1 .. x_N) on N axes turns queries and keys by R(x) = exp(sum_a x_a A_a), A_a skew-symmetric
(so R(x) is a rotation). The paper shows that q.k then depends on the offset alone, R(x)^T R(y) = R(y - x), if
and only if the A_a commute pairwise. This is its ComRoPE-LD variant ("linearly dependent"): the head's
channels in blocks of b (comrope_block), block j with one trainable skew-symmetric base matrix P_j and one
trainable scale per axis, theta_aj:

    A_a = blockdiag_j(theta_aj P_j)      A_a A_c = blockdiag_j(theta_aj theta_cj P_j^2) = A_c A_a
    R(x) = blockdiag_j exp(t_j P_j),     t_j = sum_a theta_aj x_a          (x_a the position on axis a)

Commuting by construction, so no training step can break the relative property. The axes are rope_2d's: a
sequence read row by row from a grid of width W (grid_width, shared with rope_2d) is at (row, col) =
divmod(p, W); W = 0 means text, one axis (row 0, col = p), where LD and the paper's other variant (AP, axial
partition) coincide: one trainable skew-symmetric generator per block. P_j is U_j - U_j^T (U_j strictly upper
triangular, trainable), initialised as RoPE's planes: pair k of block j, channels (jb + 2k, jb + 2k + 1)
(interleaved within a block, not rope.py's half-split), at frequency base^(-2p/D), p = jb/2 + k, and theta = 1:
at initialisation, with no grid, ComRoPE is RoPE on interleaved pairs. One set of matrices for all heads and
layers (as RoPE's frequencies). exp is torch.linalg.matrix_exp, in float64, cast at the end; keys are cached
rotated (R depends on the position alone).
"""
from dataclasses import dataclass

import torch
from torch import nn

from .base import PositionalEncoding, Settings, setting


@dataclass
class ComRoPESettings(Settings):
    rope_base: float = setting(10000.0, above=1)    # the initial frequencies base^(-2p/D)
    comrope_block: int = setting(4, at_least=2)     # b: channels per block (one angle matrix each)
    grid_width: int = setting(0, at_least=0, why="0: no grid, one axis")   # W: p at (row, col) = divmod(p, W)

    def check(self, cfg):
        super().check(cfg)
        head_dim = cfg.n_embd // cfg.n_head
        if self.comrope_block % 2 or head_dim % self.comrope_block:
            raise ValueError(f"comrope_block must be even and divide head_dim={head_dim}, got {self.comrope_block}; "
                             f"change comrope_block or n_embd/n_head")


def skew(upper, b):
    """(n, b, b) skew-symmetric U - U^T of U's strict upper triangles upper (n, b (b - 1) / 2), row by row."""
    i, j = torch.triu_indices(b, b, 1)
    u = upper.new_zeros(upper.shape[0], b, b)
    u[:, i, j] = upper
    return u - u.transpose(-1, -2)


class ComRoPE(PositionalEncoding):
    name = "comrope"
    Settings = ComRoPESettings

    def __init__(self, head_dim, block=4, base=10000.0, grid_width=0):
        super().__init__()
        self.block, self.grid_width = block, grid_width
        n, half = head_dim // block, block // 2
        freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)      # (D/2,) RoPE's
        i, j = torch.triu_indices(block, block, 1)
        plane = (i % 2 == 0) & (j == i + 1)                           # the entries (2k, 2k + 1) of each block
        upper = torch.zeros(n, len(i))
        upper[:, plane] = -freq.view(n, half).float()                 # P[2k+1, 2k] = omega: RoPE's turn direction
        self.upper = nn.Parameter(upper)                              # (n, b (b - 1) / 2): U_j's strict upper triangle
        self.scale = nn.Parameter(torch.ones(2, n))                   # theta_aj: (row, col) axes x blocks

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_embd // cfg.n_head, s.comrope_block, s.rope_base, s.grid_width)

    def grid(self, pos):
        """(2, T) (row, col) of positions pos (T,): divmod(pos, W), or (0, pos) without a grid."""
        if not self.grid_width:
            return torch.stack([torch.zeros_like(pos), pos])
        return torch.stack([pos // self.grid_width, pos % self.grid_width])

    def generators(self):
        """(2, n, b, b) float64: A_a's blocks theta_aj P_j, for the row and the column axis."""
        return self.scale.double()[:, :, None, None] * skew(self.upper.double(), self.block)[None]

    def rotations(self, pos):
        """(T, n, b, b) float64 R(x) = exp(t_j P_j) per block, t_j = sum_a theta_aj x_a at positions pos (T,)."""
        t = self.grid(pos).double().T @ self.scale.double()                      # (T, 2) @ (2, n) -> (T, n)
        return torch.linalg.matrix_exp(t[:, :, None, None] * skew(self.upper.double(), self.block))

    def rotate(self, x, ctx, key=False):
        """x (B, H, T, D) at ctx.q_pos (a key before it is cached) -> R(x) x blockwise, (B, H, T, D)."""
        R = ctx.once((id(self), "rotations"), lambda: self.rotations(ctx.q_pos)).to(x.dtype)   # (T, n, b, b)
        B, H, T, D = x.shape
        xb = x.reshape(B, H, T, D // self.block, self.block)                     # (B, H, T, n, b)
        return torch.einsum("tjik,bhtjk->bhtji", R, xb).reshape(B, H, T, D)
