"""Attention temperature rules: model options of softmax attention, for every encoding. Both
scale the queries, hence q.k (not an encoding's additive score bias), per query position.

- log-n scaling (Su 2021, kexue.fm/archives/8823; Qwen's use_logn_attn): q at position n
  scaled by max(1, log n / log L), L the trained length: nothing changes within L, and the
  entropy of attention stays near its trained level past it.
- SSMax, Scalable-Softmax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention",
  https://arxiv.org/abs/2501.19399): softmax over n visible keys replaced by

      SSMax(z)_j = n^(s z_j) / sum_j' n^(s z_j') = softmax(s log(n) z)_j,

  s = s_h learned per head (and layer); n is counted from the plan's visible keys (window,
  cache and sampled positions alike). Our initialisation: s_h = 1 / log L (softmax's at n = L).
- Llama 4's temperature tuning, 1 + attn_scale log(1 + floor((n + 1) / floor_scale)) on the
  NoPE layers only, is a setting of the none encoding (nope_attn_scale, positional/nope.py):
  a schedule's NoPE layers take it, its RoPE layers do not.
"""
import math

import torch


def logn_factor(pos, length):
    """(T,) query scales max(1, log n / log L) at positions pos, n = pos + 1 tokens seen."""
    n = (pos + 1).to(torch.float32)
    return (torch.log(n) / math.log(length)).clamp(min=1.0)


def ssmax_init(n_head, length):
    """(H,) initial s_h = 1 / log L (our choice: SSMax equals softmax at n = L)."""
    return torch.full((n_head,), 1.0 / math.log(max(2, length)))


def ssmax_factor(s, counts):
    """(H, Tq, 1) query scales s_h * log n_i, from s (H,) and counts n (Tq,)."""
    return (s[:, None] * torch.log(counts)[None, :])[..., None]
