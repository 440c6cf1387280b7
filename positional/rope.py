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
complex numbers. Keys are cached after rotation (cheap), except when the scaling needs
them raw (see below).

Length extension (positional/rope_scaling/, one file per method): a scaling dict built
from the flat rope_* config keys changes the frequencies and may add an attention
scale, folded into the cos/sin tables (so q.k is scaled by its square):
  - linear, ntk, ntk_by_parts, yarn, llama3: fixed new frequencies;
  - dynamic: frequencies recomputed from the current length in set_length, so keys
    are cached raw and re-rotated every call (cache_rotated_keys = False);
  - rerope, leaky_rerope: frequencies kept, the logits formed in attention_logits
    (rotate() is then the identity and keys are cached raw).
"""
import torch

from . import rope_scaling
from .base import PositionalEncoding


def rope_inv_freq(head_dim: int, base: float = 10000.0, scaling=None, seq_len=None):
    """(inv_freq, attention_scale): (head_dim // 2,) float64 inverse frequencies
    theta_j = base^(-2j / head_dim), transformed by the scaling dict if one is given
    (e.g. {"type": "yarn", "factor": 4.0, "original_max_position": 256}; seq_len is the
    current length, used by "dynamic"), and the factor applied to queries and keys each
    (1.0 except for yarn). See positional/rope_scaling/ for the methods and their knobs."""
    if head_dim % 2:
        raise ValueError(f"rotary dimension must be even, got {head_dim}; change rotary_fraction or n_embd/n_head")
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    return rope_scaling.apply(inv, scaling, base=base, dim=head_dim, seq_len=seq_len)


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
    supports_rope_scaling = True
    needs_score_matrix = False          # per instance: True with ReRoPE, which forms the logits itself
    supports_attention_scaling = True   # False in subclasses whose rotation ReRoPE cannot cap

    def __init__(self, head_dim: int, rotary_fraction: float = 1.0, base: float = 10000.0, scaling=None):
        super().__init__()
        self.rotary_dim = int(round(head_dim * rotary_fraction))
        if not 0 < self.rotary_dim <= head_dim or self.rotary_dim % 2:
            raise ValueError(f"rotary dimension must be even and in (0, head_dim={head_dim}], got "
                             f"{self.rotary_dim} (= rotary_fraction {rotary_fraction} * head_dim); "
                             f"change rotary_fraction or n_embd/n_head")
        self.base, self.scaling = base, scaling or None
        kind = self.scaling["type"] if self.scaling else None
        if kind in rope_scaling.ATTENTION and not self.supports_attention_scaling:
            raise ValueError(f"rope_scaling={kind!r} is not defined for {self.name}; use a frequency method "
                             f"({', '.join(m for m in rope_scaling.METHODS if m not in rope_scaling.ATTENTION)})")
        self.length_dependent = kind in rope_scaling.LENGTH_DEPENDENT
        self.capped = kind in rope_scaling.ATTENTION      # ReRoPE: logits formed in attention_logits
        self.cache_rotated_keys = not (self.length_dependent or self.capped)
        self.needs_score_matrix = self.capped
        inv, self.attention_scale = rope_inv_freq(self.rotary_dim, base, self.scaling)
        self.register_buffer("inv_freq", inv, persistent=False)
        self.freq_len = 0   # the length the current frequencies were computed for (dynamic)
        self.n_cached = 0
        self.register_buffer("cos", torch.empty(0, self.rotary_dim // 2), persistent=False)
        self.register_buffer("sin", torch.empty(0, self.rotary_dim // 2), persistent=False)

    @classmethod
    def accepts_rope_scaling(cls, kind):
        return kind in rope_scaling.METHODS and (kind not in rope_scaling.ATTENTION or cls.supports_attention_scaling)

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.n_embd // cfg.n_head, cfg.rotary_fraction, cfg.rope_base,
                   rope_scaling.scaling_from_config(cfg))

    def angles(self, positions):
        """(T, r/2) float64 angles m * theta_j."""
        return positions.to(torch.float64)[:, None] * self.inv_freq.to(torch.float64)

    def set_length(self, n_positions):
        if self.length_dependent:  # dynamic: frequencies follow the length past the original one
            n_freq = max(n_positions, self.scaling["original_max_position"])
            if n_freq != self.freq_len:
                inv, self.attention_scale = rope_inv_freq(self.rotary_dim, self.base, self.scaling, n_freq)
                self.inv_freq, self.freq_len, self.n_cached = inv.to(self.inv_freq.device), n_freq, 0
        if n_positions > self.n_cached:  # tables grow on the host, never inside rotate
            n = max(n_positions, 2 * self.n_cached)
            a = self.angles(torch.arange(n, device=self.inv_freq.device))
            self.cos, self.sin = self._scaled(a.cos()), self._scaled(a.sin())
            self.n_cached = n

    def _scaled(self, table):
        return (table * self.attention_scale).float()

    def tables(self, pos, is_key):
        return self.cos[pos], self.sin[pos]                      # (T, r/2) each

    def rotate(self, x, pos, is_key=False):
        if self.capped:  # ReRoPE rotates inside attention_logits
            return x
        cos, sin = self.tables(pos, is_key)
        return rotate_half_split(x, cos, sin)

    def rotate_at(self, x, positions):
        """Rotate x (B, H, T, D) at any, possibly fractional, positions (T,), without tables."""
        a = self.angles(positions)
        return rotate_half_split(x, self._scaled(a.cos()), self._scaled(a.sin()))

    def attention_logits(self, q, k, q_pos, k_pos, layer):
        if not self.capped:
            return None
        return rope_scaling.rerope_logits(self, q, k, q_pos, k_pos, self.scaling["window"], self.scaling.get("leak"))
