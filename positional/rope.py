"""RoPE: rotary position embeddings (Su et al. 2021, "RoFormer",
https://arxiv.org/abs/2104.09864).

Each pair of query/key channels is rotated by an angle proportional to the position:

    theta_j = base^(-2j / d),  j = 0 .. d/2 - 1           (d = rotary dim)
    (x_j, x_{j+d/2}) at position m  ->  rotated by m * theta_j

so q_m . k_n depends on m - n only. Pairing convention: half-split (GPT-NeoX / HF
`rotate_half`): channel j is paired with channel j + d/2, not with j + 1 as in Meta's
interleaved layout; the two are incompatible, checkpoints do not transfer between them.

Settings: rope_base, and rotary_fraction, the share of the head dim rotated (partial
rotary, as GPT-NeoX's rotary_pct: the frequencies are computed over the rotated width d,
the other channels carry no position). Angles are computed in float32 (float64 for the
tables) and cast at the end; never complex numbers. Keys are cached after rotation
(cheap), except when the frequencies depend on the current length (dynamic NTK).

Length extension: `scaling` = (method name, its settings) of positional/rope_scaling/, whose scale
is folded into the cos/sin tables; ReRoPE, which changes the logits instead, is a subclass (rerope.py).
"""
from dataclasses import dataclass

import torch

from . import rope_scaling
from .base import PositionalEncoding, Settings, setting

TABLE_LIMIT = 1 << 17   # positions of a generation up to which a decode step reads its rotation from a table


@dataclass
class RoPESettings(Settings):
    rope_base: float = setting(10000.0, above=1)   # theta_j = base^(-2j/d)
    rotary_fraction: float = 1.0    # share of each head's channels rotated (partial rotary)

    def check(self, cfg):
        super().check(cfg)
        head_dim = cfg.n_embd // cfg.n_head
        rotary_dim = int(round(head_dim * self.rotary_fraction))
        if not 0 < rotary_dim <= head_dim or rotary_dim % 2:
            raise ValueError(f"rotary dimension must be even and in (0, head_dim={head_dim}], got {rotary_dim} "
                             f"(= rotary_fraction {self.rotary_fraction} * head_dim); change rotary_fraction "
                             f"or n_embd/n_head")


def rope_inv_freq(head_dim: int, base: float = 10000.0, kind=None, settings=None, seq_len=0):
    """(inv_freq, attention_scale): (head_dim // 2,) float64 inverse frequencies
    theta_j = base^(-2j / head_dim), transformed by the rope_scaling method `kind` with its
    settings (e.g. "yarn", YarnSettings(rope_factor=4.0, rope_original_max_position=256);
    seq_len is the current length, used by "dynamic"), and the factor applied to queries
    and keys each (1.0 except for yarn). See positional/rope_scaling/."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if not kind:
        return inv, 1.0
    return rope_scaling.METHODS[kind][0](inv, settings, base=base, seq_len=seq_len)


def _rotate_into(x, cos, sin):
    """The rotation written into one preallocated output: no slices concatenated."""
    r2 = cos.shape[-1]
    out = torch.empty_like(x)
    x1, x2, o1, o2 = x[..., :r2], x[..., r2:2 * r2], out[..., :r2], out[..., r2:2 * r2]
    torch.mul(x1, cos, out=o1).addcmul_(x2, sin, value=-1)      # x1 cos - x2 sin
    torch.mul(x2, cos, out=o2).addcmul_(x1, sin)                # x2 cos + x1 sin
    if x.shape[-1] > 2 * r2:
        out[..., 2 * r2:] = x[..., 2 * r2:]
    return out


class _Rotate(torch.autograd.Function):
    """Per pair, the Jacobian is s * [[cos, -sin], [sin, cos]], so the backward pass is the
    same rotation with -sin. About twice as fast on CPU as autograd through slices and a
    torch.cat (measured in benchmarks/), and it saves only the (T, r/2) tables."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _rotate_into(x, cos, sin)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return _rotate_into(grad, cos, -sin), None, None


def rotate_half_split(x, cos, sin):
    """Rotate the first 2*cos.shape[-1] channels of x (half-split pairs), pass the rest.
    x: (B, H, T, D); cos, sin: (T, r/2) -> (B, H, T, D)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if cos.requires_grad or sin.requires_grad:  # learned angles: let autograd see everything
        r2 = cos.shape[-1]
        x1, x2, rest = x[..., :r2], x[..., r2:2 * r2], x[..., 2 * r2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest), dim=-1)
    return _Rotate.apply(x, cos, sin)


class RoPE(PositionalEncoding):
    name = "rope"
    Settings = RoPESettings

    def __init__(self, head_dim: int, rotary_fraction: float = 1.0, base: float = 10000.0, scaling=None):
        super().__init__()
        self.rotary_dim = int(round(head_dim * rotary_fraction))   # checked by RoPESettings.check
        self.base, self.head_dim = base, head_dim
        self.kind, self.scaling = scaling if scaling else (None, None)   # (method name, settings)
        self.length_dependent = bool(self.kind) and self.scaling.length_dependent   # dynamic: re-rotate keys
        inv, self.attention_scale = rope_inv_freq(self.rotary_dim, base, self.kind, self.scaling)
        self.register_buffer("inv_freq", inv, persistent=False)
        r2 = self.rotary_dim // 2                       # channel j's partner: j + r2, j - r2, or itself
        perm = torch.cat([torch.arange(r2, 2 * r2), torch.arange(r2), torch.arange(2 * r2, head_dim)])
        self.register_buffer("partner", perm, persistent=False)
        # P[partner[j], j] = 1: with it, a row's (mul, add) become the rotation matrix of one position
        self.register_buffer("partner_onehot", torch.eye(head_dim)[perm].T.contiguous(), persistent=False)

    @classmethod
    def from_config(cls, cfg, s, scaling=None):
        return cls(cfg.n_embd // cfg.n_head, s.rotary_fraction, s.rope_base, scaling)

    def method_label(self):
        return f"{self.kind} x{self.scaling.rope_factor:g}" if self.kind else ""   # 'yarn x4'

    def angles(self, positions, inv_freq):
        """(T, r/2) float64 angles m * theta_j."""
        return positions.to(torch.float64)[:, None] * inv_freq.to(torch.float64)

    def frequencies(self, ctx):
        """(inv_freq, attention_scale) of this forward: fixed, or (dynamic) those of the positions in play."""
        if not self.length_dependent:
            return self.inv_freq, self.attention_scale
        n = max(ctx.n_positions, self.scaling.rope_original_max_position)
        inv, scale = rope_inv_freq(self.rotary_dim, self.base, self.kind, self.scaling, n)
        return inv.to(self.inv_freq.device), scale

    def tables(self, pos, key, ctx):
        """(cos, sin) at positions pos (T,), (T, r/2) float32 each, the attention scale folded in."""
        inv, scale = self.frequencies(ctx)
        a = self.angles(pos, inv)
        return (a.cos() * scale).float(), (a.sin() * scale).float()

    def rows(self, pos, key, ctx):
        """(T, 2, D) rows of the inference rotation: a multiplier [cos, cos, 1] and an addend factor
        [-sin, sin, 0] over the channels, so rotating is x * mul + x[partner] * add (three elementwise ops)."""
        cos, sin = self.tables(pos, key, ctx)
        rest = torch.ones(len(pos), self.head_dim - self.rotary_dim, device=pos.device)
        return torch.stack([torch.cat([cos, cos, rest], -1), torch.cat([-sin, sin, rest * 0], -1)], 1)

    def matrices(self, pos, ctx):
        """The rotations of queries and keys at one position as matrices, RoFormer's R_{Theta,m} (eq. 15),
        (2, D, D): M[i, j] = mul_j [i = j] + add_j [i = partner(j)], so rotating x is one product x @ M. For
        an eager decode step; under torch.compile the elementwise form stays: inductor fuses it, and the
        product was slower there (measured: section 10 of benchmarks/cpu-2core-quiet.md). In a generation
        with fixed frequencies the rows come from a table of all its positions, made at its first step and
        kept by the cache (2 x 2 x D floats a position, up to TABLE_LIMIT positions): a gather per step
        instead of the angle, cos and sin ops."""
        both = lambda p: torch.stack([self.rows(p, False, ctx), self.rows(p, True, ctx)], 1)   # noqa: E731
        n = getattr(ctx.cache, "n_positions", 0)    # a generation's positions (none kept: linear attention's cache)
        if self.length_dependent or not ctx.n_positions <= n <= TABLE_LIMIT:
            rows = both(pos)[0]
        else:
            rows = ctx.cache.state(self, "rows", lambda: both(torch.arange(n, device=pos.device)))[pos[0]]
        mul, add = rows.unbind(1)                                                   # (2, D) each: q, k
        return torch.diag_embed(mul) + self.partner_onehot * add[:, None, :]       # (2, D, D)

    def rotate(self, x, ctx, key=False):
        """Tables are computed once per forward for every layer (ctx.once), from the positions."""
        pos = ctx.k_pos if key and self.length_dependent else ctx.q_pos
        if x.requires_grad:  # training: the custom autograd rotation, which saves only the tables
            cos, sin = ctx.once((id(self), key, "tables"), lambda: self.tables(pos, key, ctx))
            return rotate_half_split(x, cos, sin)
        if x.shape[2] == 1 and not torch.compiler.is_compiling():  # one position: x @ M
            m = ctx.once((id(self), "matrices"), lambda: self.matrices(pos, ctx).unbind(0))[key]
            B, H, _, D = x.shape
            return torch.mm(x.reshape(B * H, D), m.to(x.dtype)).view(B, H, 1, D)
        mul, add = ctx.once((id(self), key, "rows"), lambda: self.rows(pos, key, ctx)).unbind(1)   # (T, D) each
        return torch.addcmul(x * mul.to(x.dtype), x.index_select(-1, self.partner), add.to(x.dtype))

    def rotate_at(self, x, positions):
        """Rotate x (B, H, T, D) at any, possibly fractional, positions (T,) (fixed frequencies: no ctx)."""
        return rotate_half_split(x, *self.tables(positions, False, None))
