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
At inference (no gradient) the rotation is x * mul + x[partner] * add, with mul, add rows of
one precomputed (n, 4, D) table (queries and keys: xPos's scales are in it), gathered once
per forward for every layer (prepare): three elementwise ops per rotation, no table work
per step. Training keeps the custom autograd rotation (_Rotate).

Length extension (positional/rope_scaling/, one file per method): `scaling` is a pair
(method name, its settings); the method changes the frequencies and may add an attention
scale, folded into the cos/sin tables (so q.k is scaled by its square). ReRoPE, which
changes the logits instead, is a subclass (positional/rerope.py).
"""
from dataclasses import dataclass

import torch

from . import rope_scaling
from .base import PositionalEncoding, Settings


@dataclass
class RoPESettings(Settings):
    rope_base: float = 10000.0      # theta_j = base^(-2j/d)
    rotary_fraction: float = 1.0    # share of each head's channels rotated (partial rotary)

    def check(self, cfg):
        head_dim = cfg.n_embd // cfg.n_head
        rotary_dim = int(round(head_dim * self.rotary_fraction))
        if not 0 < rotary_dim <= head_dim or rotary_dim % 2:
            raise ValueError(f"rotary dimension must be even and in (0, head_dim={head_dim}], got {rotary_dim} "
                             f"(= rotary_fraction {self.rotary_fraction} * head_dim); change rotary_fraction "
                             f"or n_embd/n_head")
        if not self.rope_base > 1:
            raise ValueError(f"rope_base must be > 1, got {self.rope_base}")


def rope_inv_freq(head_dim: int, base: float = 10000.0, kind=None, settings=None, seq_len=0):
    """(inv_freq, attention_scale): (head_dim // 2,) float64 inverse frequencies
    theta_j = base^(-2j / head_dim), transformed by the rope_scaling method `kind` with its
    settings (e.g. "yarn", YarnSettings(rope_factor=4.0, rope_original_max_position=256);
    seq_len is the current length, used by "dynamic"), and the factor applied to queries
    and keys each (1.0 except for yarn). See positional/rope_scaling/."""
    if head_dim % 2:
        raise ValueError(f"rotary dimension must be even, got {head_dim}; change rotary_fraction or n_embd/n_head")
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    return rope_scaling.apply(inv, kind, settings, base=base, seq_len=seq_len)


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
    supports_rope_scaling = True

    def __init__(self, head_dim: int, rotary_fraction: float = 1.0, base: float = 10000.0, scaling=None):
        super().__init__()
        self.rotary_dim = int(round(head_dim * rotary_fraction))   # checked by RoPESettings.check
        self.base, self.head_dim = base, head_dim
        self.kind, self.scaling = scaling if scaling else (None, None)   # (method name, settings)
        self.length_dependent = bool(self.kind) and self.scaling.length_dependent
        inv, self.attention_scale = rope_inv_freq(self.rotary_dim, base, self.kind, self.scaling)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.freq_len = 0   # the length the current frequencies were computed for (dynamic)
        self.n_cached = 0
        self.register_buffer("cos", torch.empty(0, self.rotary_dim // 2), persistent=False)
        self.register_buffer("sin", torch.empty(0, self.rotary_dim // 2), persistent=False)
        self.register_buffer("rows", torch.empty(0, 4, head_dim), persistent=False)   # see grown()
        r2 = self.rotary_dim // 2                       # channel j's partner: j + r2, j - r2, or itself
        perm = torch.cat([torch.arange(r2, 2 * r2), torch.arange(r2), torch.arange(2 * r2, head_dim)])
        self.register_buffer("partner", perm, persistent=False)
        # P[partner[j], j] = 1: with it, a row's (mul, add) become the rotation matrix of one position
        self.register_buffer("partner_onehot", torch.eye(head_dim)[perm].T.contiguous(), persistent=False)
        self.at = None   # (pos, q mul, q add, k mul, k add) of this forward, or (pos, q M, k M) at one position: prepare()

    @property
    def cache_rotated_keys(self):
        return not self.length_dependent   # dynamic NTK: angles change with the length, re-rotate

    @property
    def static_decoding(self):
        return not self.length_dependent   # dynamic NTK: the tables change with the length

    @classmethod
    def from_config(cls, cfg, s, scaling=None):
        return cls(cfg.n_embd // cfg.n_head, s.rotary_fraction, s.rope_base, scaling)

    def method_label(self):
        return rope_scaling.label(self.kind, self.scaling) if self.kind else ""

    def angles(self, positions):
        """(T, r/2) float64 angles m * theta_j."""
        return positions.to(torch.float64)[:, None] * self.inv_freq.to(torch.float64)

    def set_length(self, n_positions):
        if self.length_dependent:  # dynamic: frequencies follow the length past the original one
            n_freq = max(n_positions, self.scaling.rope_original_max_position)
            if n_freq != self.freq_len:
                inv, self.attention_scale = rope_inv_freq(self.rotary_dim, self.base, self.kind, self.scaling, n_freq)
                self.inv_freq, self.freq_len, self.n_cached = inv.to(self.inv_freq.device), n_freq, 0
        if n_positions > self.n_cached:  # tables grow on the host, never inside rotate
            n = max(n_positions, 2 * self.n_cached)
            a = self.angles(torch.arange(n, device=self.inv_freq.device))
            self.cos, self.sin = self._scaled(a.cos()), self._scaled(a.sin())
            self.n_cached = n
            self.grown()

    def grown(self):
        """The tables grew: rebuild the rows of the inference rotation, (n, 4, D): at every position,
        for queries then keys, a multiplier [cos, cos, 1] and an addend factor [-sin, sin, 0] over
        the channels, so rotating is x * mul + x[partner] * add: one gather of a row, three
        elementwise ops, the same work at any position."""
        pos = torch.arange(self.n_cached, device=self.inv_freq.device)
        rest = self.head_dim - self.rotary_dim
        rows = []
        for is_key in (False, True):
            cos, sin = self.tables(pos, is_key)                                   # (n, r/2) each
            mul = torch.cat([cos, cos, torch.ones(len(pos), rest, device=pos.device)], -1)
            add = torch.cat([-sin, sin, torch.zeros(len(pos), rest, device=pos.device)], -1)
            rows += [mul, add]
        self.rows = torch.stack(rows, 1)                                           # (n, 4, D)

    def _scaled(self, table):
        return (table * self.attention_scale).float()

    def tables(self, pos, is_key):
        return self.cos[pos], self.sin[pos]                      # (T, r/2) each

    def prepare(self, pos):
        """At inference, gather the rows of this forward's positions once, for every layer's q and k.
        A single position (an eager decode step) gets its rotation as a matrix, RoFormer's R_{Theta,m}
        (eq. 15): M[i, j] = mul_j [i = j] + add_j [i = partner(j)], so rotating x is one product x @ M
        instead of three elementwise ops per q and per k in every layer. Under torch.compile the
        elementwise form stays: inductor fuses it, and the product was slower there (measured:
        section 10 of benchmarks/cpu-2core-quiet.md)."""
        self.at = None
        if not torch.is_grad_enabled():
            rows = self.rows[pos]                                                  # (T, 4, D)
            if len(pos) == 1 and not torch.compiler.is_compiling():
                mul, add = rows[0, 0::2], rows[0, 1::2]                            # (2, D) each: q, k
                m = torch.diag_embed(mul) + self.partner_onehot * add[:, None, :]              # (2, D, D)
                self.at = (pos, *m.unbind(0))                                      # M of q, of k
            else:
                self.at = (pos, *rows.unbind(1))                                   # 4 x (T, D)

    def rotate(self, x, pos, is_key=False):
        at = self.at
        if at is not None and at[0] is pos:  # inference: what prepare() made for this forward's positions
            if len(at) == 3:  # one position: x @ M, M its rotation matrix
                m = at[1 + is_key]
                return (x.reshape(-1, x.shape[-1]) @ (m if m.dtype == x.dtype else m.to(x.dtype))).view(x.shape)
            mul, add = at[3:] if is_key else at[1:3]
        elif x.requires_grad:  # training: the custom autograd rotation, which saves only the tables
            cos, sin = self.tables(pos, is_key)
            return rotate_half_split(x, cos, sin)
        else:  # other positions (keys cached raw): gather them here
            mul, add = self.rows[pos, 2 * is_key:2 * is_key + 2].unbind(1)       # (T, D) each
        return torch.addcmul(x * mul.to(x.dtype), x.index_select(-1, self.partner), add.to(x.dtype))

    def rotate_at(self, x, positions):
        """Rotate x (B, H, T, D) at any, possibly fractional, positions (T,), without tables."""
        a = self.angles(positions)
        return rotate_half_split(x, self._scaled(a.cos()), self._scaled(a.sin()))
