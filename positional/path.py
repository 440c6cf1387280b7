"""PaTH attention (Yang, Shen, Wen, Tan, Mishra, Ren, Panda & Kim 2025, "PaTH Attention: Position Encoding via
Accumulating Householder Transformations", https://arxiv.org/abs/2505.16381): a data-dependent relative position
encoding. Each token t of a layer has, per head, a Householder-like transform of the layer input x_t,

    H_t = I - beta_t w_t w_t^T,     beta_t = 2 sigmoid(u . x_t + b) in (0, 2),
    w_t = normalise(conv(W x)_t)    (a causal depthwise convolution of `path_conv` taps, then unit length;
                                     W full-rank, or of rank path_w_rank: see below)

(beta near 2: a reflection; 0: the identity), and the logits between query i and key j <= i are

    logit(i, j) = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(D)         (the empty product for j = i: q_i . k_j)

the paper's k_j^T (prod_{s=j+1..i} H_s) q_i, then softmax. Equivalently key j is carried forward,
k_j^(t) = H_t k_j^(t-1) for t > j (the paper's KV-cache update) and read by the query at its position: how a
cache decodes here (the cache holds every key transformed up to the last token fed, per layer and head, and a step
applies H_t to all of them before writing its own key). No absolute position enters: shifts change nothing.

The training and evaluation path is blockwise and exact (path_blocks): tokens in blocks of `path_block`; within a
block of L tokens the products come from the UT transform (the paper's section on its blockwise algorithm),
    T^-1 = (I + strictLower(diag(beta) W W^T))^-1 diag(beta)    (L, L), W the block's w_t as rows,
    H_e ... H_s = I - W[s..e]^T T^-1[s..e, s..e] W[s..e]          (any run s..e inside the block: T^-1 is lower
                                                                    triangular, so its diagonal blocks invert alone)
so that the block's own logits are  tril(Q K^T) - tril(Q W^T) T^-1 strictLower(W K^T),  its queries meet the keys
before the block as H_s ... H_i q_i = q_i - (tril(Q W^T) T^-1 W)_i, and the keys before it are carried over the
block by its (D, D) product, K <- K - K (W^T T^-T W): each block's products are formed once (O(T) blocks). The keys
are held in pieces of KEY_CHUNK slots, which a block's queries meet one at a time, joined by an online softmax: memory
O(T D) (the keys) besides one block's (L, KEY_CHUNK) logits, every buffer of a fixed size (the allocator reuses them),
so that a long evaluation takes every query at once (attends_by_blocks); path_reference forms the products
explicitly (tests).

W, per layer: by default (path_w_rank=0) a full-rank C -> H*D projection, our choice, kept so that a model
trained before stays the same; the paper's is low-rank, and the authors' layer (flash-linear-attention,
fla/layers/path_attn.py, https://github.com/fla-org/flash-linear-attention) makes it x -> (C -> 32) -> (32 -> H*D),
two linear maps without bias (a full-rank one where key heads are shared), then its short convolution of 3 taps and
unit length per head. path_w_rank=r > 0 is that form, W = W_up W_down ((H*D, r) @ (r, C), rank <= r,
r (C + H*D) parameters in place of C H*D), each factor N(0, 0.02) like the full-rank W.
Our other choices, not the paper's: the convolution initialised as the identity (its first tap 1), u ~ N(0, 0.02)
and b = 0 (beta = 1 at the start); with documents the convolution does not reach across a document start (the
products never do: a key and its query share a document, and so do the tokens between them).
"""
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .base import PositionalEncoding, Settings, setting


@dataclass
class PaTHSettings(Settings):
    path_block: int = setting(64, at_least=1, why="tokens per block of the blockwise path")
    path_conv: int = setting(3, at_least=1, why="taps of the short convolution before w; 1: none")
    path_w_rank: int = setting(0, at_least=0, why="rank of the map W making w; 0: full rank, r > 0: C -> r -> H*D")

    def check(self, cfg):
        super().check(cfg)
        if self.path_w_rank >= cfg.n_embd:
            raise ValueError(f"path_w_rank={self.path_w_rank} is not below n_embd={cfg.n_embd}, so W would not be "
                             f"low-rank; use path_w_rank=0 for the full-rank W, or a rank below {cfg.n_embd}")


class PaTH(PositionalEncoding):
    name = "path"
    Settings = PaTHSettings
    attends_by_blocks = True   # path_blocks carries the keys block to block: the model hands it every query

    def __init__(self, n_layer: int, n_head: int, n_embd: int, block: int = 64, conv: int = 3, w_rank: int = 0):
        super().__init__()
        self.n_head, self.block, self.w_rank = n_head, block, w_rank
        if w_rank:  # the paper's low-rank W = W_up W_down (the docstring)
            self.w_down = nn.Parameter(torch.randn(n_layer, w_rank, n_embd) * 0.02)  # W_down: (L, r, C)
            self.w_up = nn.Parameter(torch.randn(n_layer, n_embd, w_rank) * 0.02)    # W_up: (L, H*D, r)
        else:
            self.w_proj = nn.Parameter(torch.randn(n_layer, n_embd, n_embd) * 0.02)  # W: (L, H*D, C)
        taps = torch.zeros(n_layer, n_embd, conv)                                     # (L, H*D, k): tap j, j back
        taps[..., 0] = 1.0
        self.conv = nn.Parameter(taps)
        self.beta_proj = nn.Parameter(torch.randn(n_layer, n_head, n_embd) * 0.02)   # u: (L, H, C)
        self.beta_bias = nn.Parameter(torch.zeros(n_layer, n_head))                  # b: (L, H)

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_layer, cfg.n_head, cfg.n_embd, s.path_block, s.path_conv, s.path_w_rank)

    def read_input(self, x, ctx, layer):
        """(w (B, H, T, D) unit directions, beta (B, H, T)) of the layer input x, once per forward and layer."""
        ctx.once((id(self), layer), lambda: self.transforms(x, ctx, layer))

    def transforms(self, x, ctx, layer):
        B, T, C = x.shape
        wide = torch.promote_types(x.dtype, torch.float32)
        with torch.autocast(x.device.type, enabled=False):
            x = x.to(wide)
            u = convolved(self.projected(x, layer), self.conv[layer].to(wide), ctx, (self, layer))
            w = F.normalize(u.view(B, T, self.n_head, -1), dim=-1, eps=1e-6).transpose(1, 2)   # (B, H, T, D)
            beta = 2 * torch.sigmoid(F.linear(x, self.beta_proj[layer].to(wide), self.beta_bias[layer].to(wide)))
        return w, beta.transpose(1, 2)                                                          # (B, H, T)

    def projected(self, x, layer):
        """W x (B, T, H*D) of x (B, T, C), in x's dtype: one full-rank map, or two without bias, C -> r -> H*D."""
        if self.w_rank:
            return F.linear(F.linear(x, self.w_down[layer].to(x.dtype)), self.w_up[layer].to(x.dtype))
        return F.linear(x, self.w_proj[layer].to(x.dtype))

    def attend(self, q, k, v, ctx, layer):
        w, beta = ctx.once((id(self), layer), lambda: missing_input(layer))
        a, b = ctx.rows.start or 0, ctx.rows.stop or w.shape[2]     # the forward's rows of these queries
        wide, dtype = torch.promote_types(q.dtype, torch.float32), v.dtype    # in float32 at least
        q, k, v = q.to(wide), k.to(wide), v.to(wide)
        cache = ctx.cache
        if cache is None:  # the forward's own keys: token t at key t
            state = k.new_zeros(*k.shape[:2], 0, k.shape[3])
            y, _ = path_blocks(q, k, v, w[:, :, :b], beta[:, :, :b], ctx.seen_rows, state, None, a, self.block,
                               ctx.drop)
            return y.to(dtype)
        held = cache.state(self, f"keys{layer}", lambda: k.new_zeros(*k.shape[:2], cache.size, k.shape[3]))
        n = k.shape[2]                                                # the attended slots
        if a == 0 and b == w.shape[2]:  # every query of the call at once: carry the keys in place
            before = held[:, :, :n]
        else:  # a long call by row blocks (the last first): the keys as they were before the call, kept once
            before = ctx.once((id(self), layer, "before"), lambda: held[:, :, :n].clone())
        y, after = path_blocks(q, k, v, w[:, :, :b], beta[:, :, :b], ctx.seen_rows, before, cache.slot[:b], a,
                               self.block, ctx.drop)
        if b == w.shape[2]:  # past the call's last token: the keys the next call reads
            held[:, :, :n] = after.detach().to(held.dtype)
        return y.to(dtype)


def convolved(u, taps, ctx, owner):
    """Causal depthwise convolution of u (B, T, E) with taps (E, k) (tap j: the token j back), zero before the start
    and across a document start; with a cache its last k-1 rows (and documents) are kept in order."""
    k, T, doc = taps.shape[1], u.shape[1], ctx.doc
    if k == 1:
        return u * taps[:, 0]
    past_doc = None if doc is None else doc.new_full((k - 1,), -1)             # no document before the start
    if ctx.cache is not None:
        ring = ctx.cache.state(owner[0], f"conv{owner[1]}", lambda: u.new_zeros(u.shape[0], k - 1, u.shape[2]))
        full = torch.cat([ring, u], 1)
        ring.copy_(full[:, -(k - 1):].detach())
        if doc is not None:
            ring_doc = ctx.cache.state(owner[0], f"conv_doc{owner[1]}", lambda: doc.new_full((k - 1,), -1))
            past_doc = ring_doc.clone()
            ring_doc.copy_(torch.cat([past_doc, doc])[-(k - 1):])
    else:
        full = torch.cat([u.new_zeros(u.shape[0], k - 1, u.shape[2]), u], 1)  # (B, k-1+T, E)
    docs = None if doc is None else torch.cat([past_doc, doc])
    y = 0
    for j in range(k):
        tap = full[:, k - 1 - j:k - 1 - j + T] * taps[:, j]
        if docs is not None and j:
            tap = tap * (docs[k - 1 - j:k - 1 - j + T] == doc)[:, None].to(u.dtype)
        y = y + tap
    return y


def ut_inverse(w, beta):
    """T^-1 = (I + strictLower(diag(beta) W W^T))^-1 diag(beta): (B, H, L, L) of w (B, H, L, D), beta (B, H, L)."""
    L = w.shape[2]
    eye = torch.eye(L, dtype=w.dtype, device=w.device)
    m = eye + torch.tril(beta[..., :, None] * (w @ w.transpose(-1, -2)), -1)
    return torch.linalg.solve_triangular(m, torch.diag_embed(beta), upper=False, unitriangular=True)


KEY_CHUNK = 1024   # keys a piece of path_blocks' online softmax: a block's logits (B, H, block, KEY_CHUNK) at most


def path_blocks(q, k, v, w, beta, seen_rows, state, slots, a, block, drop=lambda p: p, chunk=KEY_CHUNK):
    """PaTH attention of the queries of tokens a..b-1 (q: (B, H, b-a, D)) by blocks of `block` tokens, exact.
    k, v (B, H, S, D): the keys and values by slot, token t's at slots[t] (slots: (b,)); state (B, H, S, D): the keys
    before token 0, carried to it (zeros where none); slots None: token t's key is key t (no cache) and state starts
    empty, (B, H, 0, D), growing by each block. w, beta: tokens 0..b-1's; seen_rows(i, j): (j-i, S) or (H, j-i, S)
    bool, the keys queries i..j-1 (of the b-a) see. Each block's products are formed once, and the keys before it are
    carried over it by its (D, D) product; the carried keys are held in pieces of about `chunk` slots, each block's
    queries meet them a piece at a time (online_softmax): O(b D^2 / block) a block, memory the keys and a block's
    (block, chunk) logits, each buffer of a size fixed by block and chunk. Returns (y (B, H, b-a, D), the keys carried
    past token b-1 (B, H, S, D))."""
    b, scale = w.shape[2], 1.0 / math.sqrt(q.shape[-1])
    edges = [*range(0, a, block), *range(a, b, block), b]
    keys = [piece for piece in state.split(chunk, 2) if piece.shape[2]]   # by slots 0..S-1 (none without a cache)
    ys = []
    for s, e in zip(edges[:-1], edges[1:]):
        W, inv = w[:, :, s:e], ut_inverse(w[:, :, s:e], beta[:, :, s:e])
        at = torch.arange(s, e, device=k.device) if slots is None else slots[s:e]
        kb = k[:, :, at]                                                             # (B, H, L, D) its own keys
        if e > a:   # the block's queries: the earlier keys as carried to s - 1, the block's own by the UT form
            qb = q[:, :, s - a:e - a]
            r = torch.tril(qb @ W.transpose(-1, -2)) @ inv                            # (B, H, L, L)
            own = torch.tril(qb @ kb.transpose(-1, -2) - r @ torch.tril(W @ kb.transpose(-1, -2), -1))
            seen = seen_rows(s - a, e - a)
            ys.append(online_softmax(block_pieces(qb - r @ W, keys, own, seen, at, v, scale), drop))
        product = W.transpose(-1, -2) @ inv.transpose(-1, -2) @ W                    # I - (H_{e-1} ... H_s)^T, (D, D)
        keys = [piece - piece @ product for piece in keys]                           # H_{e-1} ... H_s K
        mine = kb - (torch.triu(kb @ W.transpose(-1, -2), 1) @ inv.transpose(-1, -2)) @ W  # H_{e-1} ... H_{j+1} k_j
        keys = appended(keys, mine, chunk) if slots is None else placed(keys, mine, at, chunk)
    return torch.cat(ys, 2), torch.cat(keys, 2)


def block_pieces(carried_q, keys, own, seen, at, v, scale):
    """A block's (logits, seen, values) a piece at a time: its queries as carried back to the block start
    (carried_q (B, H, L, D)) over each piece of the earlier keys (their slots `at` excluded: the block's own), then
    its own keys' logits (own (B, H, L, L))."""
    earlier = seen.index_fill(-1, at, False)
    start = 0
    for piece in keys:
        end = start + piece.shape[2]
        yield (carried_q @ piece.transpose(-1, -2)) * scale, earlier[..., start:end], v[:, :, start:end]
        start = end
    yield own * scale, seen.index_select(-1, at), v[:, :, at]


def online_softmax(pieces, drop):
    """softmax(logits, unseen keys masked) @ values over the keys of every piece ((logits (B, H, L, n), seen (L, n) or
    (H, L, n) bool, values (B, H, n, D)) at a time), joined by a running maximum and sum (Milakov & Gimelshein 2018,
    "Online normalizer calculation for softmax", https://arxiv.org/abs/1805.02867, algorithm 3; Dao et al. 2022,
    FlashAttention, section 3.1): no tensor over all keys at once. Every query must see a key of some piece."""
    top = total = y = None
    for logits, seen, values in pieces:
        logits = logits.masked_fill(~seen, float("-inf"))
        peak = logits.detach().amax(-1, keepdim=True)                # the result does not depend on the shift
        new_top = peak if top is None else torch.maximum(top, peak)
        shift = new_top.masked_fill(new_top == float("-inf"), 0.0)   # rows seeing no key yet: exp(-inf) = 0 below
        p = torch.exp(logits - shift)
        if top is None:
            total, y = p.sum(-1, keepdim=True), drop(p) @ values
        else:
            rescale = torch.exp(top - shift)
            total, y = total * rescale + p.sum(-1, keepdim=True), y * rescale + drop(p) @ values
        top = new_top
    return y / total


def appended(keys, mine, chunk):
    """The pieces of keys with a block's own (mine (B, H, L, D)) after them: on the last piece while it holds fewer
    than `chunk`, else as a new piece."""
    if keys and keys[-1].shape[2] < chunk:
        return keys[:-1] + [torch.cat([keys[-1], mine], 2)]
    return keys + [mine]


def placed(keys, mine, at, chunk):
    """The pieces of keys with a block's own (mine (B, H, L, D)) written at their slots `at` (L,). Each piece takes
    the rows whose slot falls in it; the others go to a spare slot past its end, dropped after: every shape is fixed
    by the pieces' sizes, none by the slots' values (a compiled decode step does not guard on them)."""
    out, start = [], 0
    for piece in keys:
        n = piece.shape[2]
        local = at - start
        local = torch.where((local >= 0) & (local < n), local, n)
        spare = torch.cat([piece, piece[:, :, :1]], 2)
        out.append(spare.index_copy(2, local, mine)[:, :, :n])
        start += n
    return out


def path_reference(q, k, v, w, beta, seen):
    """The definition, for tests: every product H_i ... H_{j+1} formed as a (D, D) matrix, O(T^2 D^2).
    q, k, v, w (B, H, T, D) of one sequence's tokens (key t = token t), beta (B, H, T), seen (T, T) bool."""
    B, H, T, D = q.shape
    eye = torch.eye(D, dtype=q.dtype)
    hs = eye - beta[..., None, None] * (w[..., :, None] @ w[..., None, :])         # (B, H, T, D, D): H_t
    logits = q.new_full((B, H, T, T), float("-inf"))
    for i in range(T):
        prod = eye.expand(B, H, D, D)
        for j in range(i, -1, -1):   # prod = H_i ... H_{j+1}
            if seen[i, j]:
                logits[:, :, i, j] = (q[:, :, i, None, :] @ prod @ k[:, :, j, :, None])[..., 0, 0] / math.sqrt(D)
            prod = prod @ hs[:, :, j]
    return torch.softmax(logits, -1) @ v


def missing_input(layer):
    raise RuntimeError(f"PaTH's transforms of layer {layer} are read from the layer input: call read_input(x, ctx, "
                       f"layer) before it attends")
