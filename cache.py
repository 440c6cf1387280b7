"""The caches that let GPT.forward continue a sequence, one kind per attention:

  KVCache               softmax attention: every key and value, up to max_len positions
  WindowKVCache         softmax attention with a window: the sinks and the last window - 1
  LinearAttentionCache  linear attention: its running sums, whatever the length
  LayerCaches           per-layer windows (layer_windows): one of the above per distinct window

GPT.setup_cache builds the one new_cache picks (from the attention kind and the layers'
windows, never from the encoding). All answer the same questions: `length` (tokens seen),
`max_len`, begin(pos) (GPT.run, before the layers: the positions of this call), key_positions(T,
layer) (the positions of the keys a call of T tokens attends to individually in that layer),
advance(T) (once per forward, after the last layer) and reset().
Buffers are registered persistent=False: a cache never enters a state_dict.

  StaticKVCache         static decoding (decode.py, gpt-fast's design): fixed shapes, slots
                        addressed by a positions tensor, no host-side counter per token
"""
import torch
from torch import nn


def new_cache(cfg, batch, max_len, dtype, device, windows=None):
    """The cache for cfg's attention; max_len is only used by the unbounded KVCache.
    windows: each layer's window (a per-layer schedule); None: cfg.window for every layer."""
    H, D = cfg.n_head, cfg.n_embd // cfg.n_head
    if cfg.attention == "linear":
        return LinearAttentionCache(cfg.n_layer, batch, H, D, dtype, device)
    windows = list(windows) if windows is not None else [cfg.window] * cfg.n_layer

    def kv(n_layer, window):
        if window:
            return WindowKVCache(n_layer, batch, H, window, cfg.sinks, D, dtype, device)
        return KVCache(n_layer, batch, H, max_len, D, dtype, device)

    return kv(len(windows), windows[0]) if len(set(windows)) == 1 else LayerCaches(windows, kv)


class Cache(nn.Module):
    """What every cache shares: begin(pos) does nothing unless the cache addresses by position."""

    def begin(self, pos):
        pass


class KVCache(Cache):
    """Static key/value buffers for all layers. k, v: (L, B, H, max_len, D)."""

    def __init__(self, n_layer, batch, n_head, max_len, head_dim, dtype, device):
        super().__init__()
        shape = (n_layer, batch, n_head, max_len, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.max_len, self.length = max_len, 0

    def key_positions(self, T, layer=None):
        """(length + T,) positions of the keys once T new tokens are written."""
        return torch.arange(self.length + T, device=self.k.device)

    def write(self, layer, k, v):
        """Store k, v (B, H, T, D) after the cached ones; return all keys/values so far."""
        start, end = self.length, self.length + k.shape[2]
        self.k[layer, :, :, start:end] = k
        self.v[layer, :, :, start:end] = v
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]   # (B, H, end, D)

    def advance(self, T):
        self.length += T

    def reset(self):
        self.length = 0


class WindowKVCache(Cache):
    """A bounded cache for window attention with sinks (StreamingLLM, Xiao et al. 2023,
    https://arxiv.org/abs/2309.17453): it keeps the first `sinks` keys and the last
    window - 1 keys, all a later query can still see, so memory stays constant however
    long the generation runs. Same interface as KVCache.

    Positions: keys keep their original positions (key_positions returns them), and
    the attention plan applies the window from those. StreamingLLM instead re-numbers the
    positions inside the cache; we do not, because (1) cached decoding then equals the
    windowed forward of evaluate.py and training exactly, in every layer; (2) it works
    for every encoding, including absolute ones whose position is already inside the
    hidden states, and keeps keys cached after rotation; (3) for relative encodings the
    window's distances are identical under both schemes, only the sinks sit farther away.
    k, v: (L, B, H, sinks + window - 1, D); keys/values of this call are held until advance."""

    def __init__(self, n_layer, batch, n_head, window, sinks, head_dim, dtype, device):
        super().__init__()
        self.window, self.sinks, self.keep = window, sinks, sinks + window - 1
        shape = (n_layer, batch, n_head, self.keep, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("pos", torch.zeros(self.keep, dtype=torch.long, device=device), persistent=False)
        self.max_len, self.length, self.n_kept = float("inf"), 0, 0
        self.pending = [None] * n_layer

    def key_positions(self, T, layer=None):
        """(n_kept + T,) original positions of the kept keys, then of the T new ones."""
        new = torch.arange(self.length, self.length + T, device=self.pos.device)
        return torch.cat([self.pos[:self.n_kept], new])

    def write(self, layer, k, v):
        """k, v: (B, H, T, D). Returns the kept keys/values followed by the new ones."""
        n = self.n_kept
        k = torch.cat([self.k[layer, :, :, :n], k], dim=2)                      # (B, H, n + T, D)
        v = torch.cat([self.v[layer, :, :, :n], v], dim=2)
        self.pending[layer] = (k, v)
        return k, v

    def advance(self, T):
        pos = self.key_positions(T)
        end = self.length + T
        keep = ((pos < self.sinks) | (pos > end - self.window)).nonzero().squeeze(1)   # sinks + last window - 1
        for layer, (k, v) in enumerate(self.pending):
            self.k[layer, :, :, :len(keep)] = k[:, :, keep]
            self.v[layer, :, :, :len(keep)] = v[:, :, keep]
        self.pos[:len(keep)] = pos[keep]
        self.n_kept, self.length = len(keep), end
        self.pending = [None] * len(self.pending)

    def reset(self):
        self.length = self.n_kept = 0


class LinearAttentionCache(Cache):
    """The running sums of linear attention (linear_attention.py) after the last token:
    S (L, B, H, D, D) and z (L, B, H, D). Its size does not depend on the length, so
    decoding runs in constant memory; there is no max_len. The past keys are summarised,
    not kept: key_positions(T) gives only the T new positions."""

    def __init__(self, n_layer, batch, n_head, head_dim, dtype, device):
        super().__init__()
        D = head_dim
        self.register_buffer("S", torch.zeros(n_layer, batch, n_head, D, D, dtype=dtype, device=device),
                             persistent=False)
        self.register_buffer("z", torch.zeros(n_layer, batch, n_head, D, dtype=dtype, device=device),
                             persistent=False)
        self.max_len, self.length = float("inf"), 0

    def key_positions(self, T, layer=None):
        return torch.arange(self.length, self.length + T, device=self.S.device)

    def read(self, layer):
        """(S, z) summing the tokens so far, or None at the start of a sequence."""
        return (self.S[layer], self.z[layer]) if self.length else None

    def write(self, layer, S, z):
        """Store the sums after this call's tokens; GPT.forward advances once all layers wrote."""
        self.S[layer], self.z[layer] = S, z

    def advance(self, T):
        self.length += T

    def reset(self):
        self.length = 0


class LayerCaches(Cache):
    """Layers with different windows (GPT's layer_windows): one cache per distinct window, built
    by make(n_layers, window) and holding the layers that have it, so windowed layers keep a
    bounded WindowKVCache and global ones a KVCache. Same interface; key_positions(T, layer)
    answers for that layer's cache."""

    def __init__(self, windows, make):
        super().__init__()
        distinct = list(dict.fromkeys(windows))
        self.parts = nn.ModuleList(make(windows.count(w), w) for w in distinct)
        self.where = [(distinct.index(w), windows[:i].count(w)) for i, w in enumerate(windows)]  # (part, index)
        self.max_len = min(p.max_len for p in self.parts)

    @property
    def length(self):
        return self.parts[0].length

    def key_positions(self, T, layer=0):
        return self.parts[self.where[layer][0]].key_positions(T)

    def write(self, layer, k, v):
        part, i = self.where[layer]
        return self.parts[part].write(i, k, v)

    def advance(self, T):
        for p in self.parts:
            p.advance(T)

    def reset(self):
        for p in self.parts:
            p.reset()


EMPTY = 2 ** 30   # the position of a slot not yet written: after every query, so the causal mask hides it


def static_cache(cfg, batch, max_len, dtype, device, windows, ordered=False, chunk=16):
    """The StaticKVCache for positions 0 .. max_len - 1: a ring of sinks + window - 1 + chunk
    slots when every layer has the same window, else one slot per position (the windows, if
    any, then act through the mask). ordered: the keys are handed over in position order."""
    H, D = cfg.n_head, cfg.n_embd // cfg.n_head
    window = windows[0] if len(set(windows)) == 1 else 0
    period = window - 1 + chunk if window and cfg.sinks + window - 1 + chunk < max_len else 0
    return StaticKVCache(cfg.n_layer, batch, H, D, max_len, cfg.sinks, period, dtype, device, ordered)


class StaticKVCache(Cache):
    """Keys and values in fixed slots, addressed by a tensor of positions (gpt-fast's cache,
    plus a ring for windows), so a decode step has the same shapes at every token and runs
    with no host-side bookkeeping: it can be compiled once.

    Slot of position p: p itself (period 0), or for a ring the sinks keep slots 0..sinks-1
    and p >= sinks goes to sinks + (p - sinks) % period. slot_pos (S,) holds the position
    written in each slot, EMPTY for none yet: key_positions returns it, so the causal mask,
    the window and every score bias are computed from true positions, and empty slots are
    masked like future keys. A call may bring up to `chunk` tokens (period - window + 1) to
    a ring without overwriting a key its own queries still see; decode.py prefills in chunks.
    k{layer}, v{layer}: (B, H, S, D), S = max_len or sinks + period. Keys are attended in slot order,
    not position order (same result up to float rounding), unless `ordered` (an encoding that
    counts keys in order, CoPE): a ring then hands its slots over rotated into position order,
    the sinks, then the ring from the slot the next position will take (empty slots, before
    the ring wraps, come first; they are masked), one index_select of S rows per layer.

    `filled`: the leading slots a call attends to, S unless the caller narrows it. A step
    (decode.decode_step) sets it to the slots written so far (a host int the caller already
    knows, so no sync): attending over all 2000 slots of a 2000-token generation from the first
    token costs twice the attention work of the growing cache (measured), and a view costs
    nothing. A compiled step takes it as a symbolic size (one graph); under a ring it is S."""

    def __init__(self, n_layer, batch, n_head, head_dim, max_len, sinks, period, dtype, device, ordered=False):
        super().__init__()
        # one slot more than positions, never written: a step attends over at most max_len slots, so
        # the count a compiled step takes symbolically (decode.py) never equals the buffers' size,
        # which would be a case of its own (measured: a recompilation at the last step of a full cache)
        size = sinks + period if period else max_len + 1
        shape = (batch, n_head, size, head_dim)
        for i in range(n_layer):  # one buffer per layer: a compiled step writing into a view of one
            # (L, ...) buffer was measured to copy the whole cache at every token (functionalization)
            self.register_buffer(f"k{i}", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
            self.register_buffer(f"v{i}", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("slot_pos", torch.full((size,), EMPTY, dtype=torch.long, device=device),
                             persistent=False)
        self.max_len, self.sinks, self.period, self.size = max_len, sinks, period, size
        self.slot, self.filled = None, size
        self.ordered = ordered and bool(period)   # keys rotated into position order (see above)
        self.order = None                         # (S,) slot of each key, in position order
        if self.ordered:
            self.register_buffer("sink_slots", torch.arange(sinks, device=device), persistent=False)
            self.register_buffer("ring", torch.arange(period, device=device), persistent=False)
        self.length = 0   # only GPT.forward counts here; decode.Decoder keeps its positions in a tensor

    def slots(self, pos):
        if not self.period:
            return pos
        return torch.where(pos < self.sinks, pos, self.sinks + (pos - self.sinks) % self.period)

    def begin(self, pos):
        """Place the positions pos (T,) of this call: their slots now hold them."""
        self.slot = self.slots(pos)
        self.slot_pos.index_copy_(0, self.slot, pos)
        if self.ordered:  # the oldest ring slot is the one the next position will take
            oldest = (pos[-1:] + 1 - self.sinks) % self.period
            self.order = torch.cat([self.sink_slots, self.sinks + (oldest + self.ring) % self.period])

    def key_positions(self, T, layer=None):
        if self.ordered:
            return self.slot_pos.index_select(0, self.order)                 # (S,)
        return self.slot_pos[:self.filled]                                   # (S,)

    def write(self, layer, k, v):
        """k, v (B, H, T, D) into this call's slots; returns the attended slots (B, H, S, D)."""
        ks, vs = getattr(self, f"k{layer}"), getattr(self, f"v{layer}")          # (B, H, S, D)
        ks.index_copy_(2, self.slot, k.to(ks.dtype))
        vs.index_copy_(2, self.slot, v.to(vs.dtype))
        if self.ordered:
            return ks.index_select(2, self.order), vs.index_select(2, self.order)
        n = self.filled
        return ks[:, :, :n], vs[:, :, :n]

    def advance(self, T):
        self.length += T

    def reset(self):
        self.slot_pos.fill_(EMPTY)
        self.filled, self.length = self.size, 0
