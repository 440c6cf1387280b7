"""FoX, the Forgetting Transformer (Lin, Nikishin, He & Courville 2025, "Forgetting
Transformer: Softmax Attention with a Forget Gate", https://arxiv.org/abs/2503.02130).

No position signal of its own (NoPE): each head h of each layer reads a scalar forget
gate from the layer's input x_t (B, T, C) and the logits decay by the gates in between:

    f_t  = sigmoid(w_h . x_t + b_h)                          (per layer, per head)
    c_t  = sum_{l <= t} log f_l                              (cumulative, <= 0, decreasing)
    logit(i, j) = q_i . k_j / sqrt(D) + sum_{l=j+1..i} log f_l  =  q_i . k_j / sqrt(D) + c_i - c_j

A data-dependent ALiBi: with f_t = exp(-m) everywhere it is ALiBi with slope m, which is
how the gates start here (b_h = log(e^-m_h / (1 - e^-m_h)) for ALiBi's slopes m_h,
w ~ N(0, 0.02); our choice of initialisation, not the paper's). The model's only sense
of order is the causal mask plus these gates, so the scores depend on content, never on
absolute positions: shifting every position changes nothing.

Interface: the gates need the layer input, which the encoding sees through
layer_input(x, pos, layer) (base.py); the logits are formed in attention_logits (the
explicit-softmax path, no fused kernel: the bias is per batch row, (B, H, Tq, Tk)).

Cached decoding: c_i - c_j needs c at every cached key and the running sum at the last
token. Both are kept here, keyed by absolute position (store: (B, H, positions) per
layer, detached; total: (B, H)): a call with cached keys before it (Tk > Tq) continues
the running sum and reads c at the keys' positions (so a windowed cache that drops keys
works too); a call without (training, a prefill) starts over, and its c differs from a
continued one by a constant that cancels in c_i - c_j. The store costs B*H*4 bytes per
position and layer, 1/(2D) of the KV cache.

Static decoding (decode.py): start_decoding allocates one (B, H, n) tensor of c per layer for
the generation's n positions; layer_input continues the sum from c at the position before
the call and writes c at the call's positions in place, and attention_logits reads c at
the queries and keys from it: no Python state per token, one graph for every step.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F

from .alibi import alibi_slopes
from .base import PositionalEncoding


class FoX(PositionalEncoding):
    name = "fox"
    scores_by_query_block = True

    def __init__(self, n_layer: int, n_head: int, n_embd: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_layer, n_head, n_embd) * 0.02)     # w: (L, H, C)
        m = alibi_slopes(n_head).double()
        self.bias = nn.Parameter((-m - torch.log1p(-torch.exp(-m))).float().repeat(n_layer, 1))  # b: (L, H)
        self.log_f = {}       # layer -> (B, H, T) log gates of the current call, until attention_logits
        self.store = {}       # layer -> (B, H, capacity) c_t at absolute position t (cached decoding)
        self.total = {}       # layer -> (B, H) c at the last position seen
        self.decoding = False  # static decoding: c lives in the buffers sums{layer}, (B, H, n)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_head, cfg.n_embd)

    def start_decoding(self, batch, n_positions, device, dtype):
        for layer in range(self.weight.shape[0]):  # buffers: a compiled step takes them as inputs
            self.register_buffer(f"sums{layer}", torch.zeros(batch, self.weight.shape[1], n_positions, device=device),
                                 persistent=False)
        self.decoding = True

    def end_decoding(self):
        self.decoding = False

    def layer_input(self, x, pos, layer):
        with torch.autocast(x.device.type, enabled=False):  # gates and their sums in float32
            logit = F.linear(x.float(), self.weight[layer], self.bias[layer])          # (B, T, H)
        log_f = F.logsigmoid(logit).transpose(1, 2)                                   # (B, H, T)
        if not self.decoding:
            self.log_f[layer] = log_f
            return
        sums = getattr(self, f"sums{layer}")                                          # (B, H, n): c by position
        before = (pos[:1] - 1).clamp(min=0)                                           # the position before the call
        c0 = sums.index_select(-1, before) * (pos[:1] > 0)                            # (B, H, 1); 0 at the start
        sums.index_copy_(-1, pos, c0 + log_f.cumsum(-1))

    def static_c(self, layer, q_pos, k_pos):
        """c at the queries (B, H, Tq) and the keys (B, H, Tk) from the decoding sums (empty
        slots, at positions past the last, read the last position's c: masked anyway)."""
        sums = getattr(self, f"sums{layer}")
        return sums.index_select(-1, q_pos), sums.index_select(-1, k_pos.clamp(max=sums.shape[-1] - 1))

    def cumulative(self, layer, log_f, q_pos, k_pos):
        """c at the queries (B, H, Tq) and at the keys (B, H, Tk), continuing the running sum
        when keys precede this call (see the docstring); keeps c for later calls."""
        B, H, T = log_f.shape
        c = log_f.cumsum(-1)                                                          # (B, H, Tq)
        n_past = len(k_pos) - T
        store = self._storage(layer, B, H, int(q_pos.max()) + 1, log_f.device)
        if n_past > 0:
            c = c + self.total.get(layer, torch.zeros(B, H, device=c.device))[..., None]
            c_k = torch.cat([store[:, :, k_pos[:n_past]], c], dim=-1)                 # (B, H, Tk)
        else:
            c_k = c
        store[:, :, q_pos] = c.detach()
        self.total[layer] = c[..., -1].detach()
        return c, c_k

    def _storage(self, layer, B, H, n, device):
        s = self.store.get(layer)
        if s is None or s.shape[:2] != (B, H) or s.device != device:
            s = torch.zeros(B, H, 0, device=device)
        if s.shape[-1] < n:   # grow by doubling: decoding token by token stays linear
            grown = torch.zeros(B, H, max(n, 2 * s.shape[-1]), device=device)
            grown[..., :s.shape[-1]] = s
            s = grown
        self.store[layer] = s
        return s

    def c_of(self, layer, q_pos, k_pos):
        """c at the queries and at the keys of this call, or of one of its query blocks (model.py,
        scores_by_query_block: in training, queries q_pos the last of the first Tk keys). The
        layer's gates are dropped, and c kept for cached decoding, at the call's last block."""
        log_f = self.log_f[layer]                                                     # (B, H, T) of the whole call
        T, Tq, Tk = log_f.shape[-1], len(q_pos), len(k_pos)
        if Tq == T or Tk == T:  # the whole call, or its last block (whose keys are the call's positions)
            del self.log_f[layer]
            c, c_k = self.cumulative(layer, log_f, q_pos if Tq == T else k_pos, k_pos)
            return c[..., c.shape[-1] - Tq:], c_k
        c = log_f.cumsum(-1)                                                          # an earlier block
        return c[..., Tk - Tq:Tk], c[..., :Tk]

    def attention_logits(self, q, k, q_pos, k_pos, layer):
        B, H, Tq, D = q.shape
        Tk = k.shape[2]
        c, c_k = self.static_c(layer, q_pos, k_pos) if self.decoding else self.c_of(layer, q_pos, k_pos)
        decay = c[..., :, None] - c_k[..., None, :]                                   # (B, H, Tq, Tk), float32
        if q.dtype != decay.dtype:  # bfloat16/float16: the decay stays float32, added after the product
            return (q @ k.transpose(-1, -2)) / math.sqrt(D) + decay
        # one GEMM forms q.k / sqrt(D) and adds the decay to it: no separate product and sum
        scores = torch.baddbmm(decay.view(B * H, Tq, Tk), q.reshape(B * H, Tq, D),
                               k.reshape(B * H, Tk, D).transpose(1, 2), alpha=1.0 / math.sqrt(D))
        return scores.view(B, H, Tq, Tk)
