"""The long-context engine: attention over more than ATTENTION_BLOCK queries without gradients (long
evaluations), where a (B, H, Tq, Tk) score matrix would not fit, and where the fused kernels only CPU
PyTorch exposes make it fast. attention/plan.py's choose_kernel decides when it applies (its kernels "blocks",
"relative", "banded", "own_blocks"); model.attend calls attend() below, the one entry; GPT.run calls by_chunks()
when a bias made per query block would be made again by every layer.

  blocks    query blocks of ATTENTION_BLOCK rows or fewer (fewer where B H rows Tk would pass
            BLOCK_SCORES), each attended by the model's short paths: O(H block Tk) memory.
  relative  a causal bias by distance alone (relative_bias) at consecutive positions: with the keys in
            reverse order the bias of query row r and key j' depends on r + j' alone, so a block's
            (H, rows, keys) bias is a strided view of one vector per head (a Hankel matrix, hankel()):
            O(H T) memory, no (H, Tq, Tk) tensor. SDPA's CPU kernel takes the view as its mask.
  banded    an encoding forming its own logits (OwnLogits) whose far keys take one form (far()): the
            logits are formed for the near band of keys alone, the far ones go through the private CPU
            flash kernel (aten._scaled_dot_product_flash_attention_for_cpu, the only SDPA entry that
            returns the log-sum-exp), and the parts are joined by their log-sum-exps (join).
  own_blocks  an encoding that attends by blocks of its own (attends_by_blocks: PaTH, whose blocks carry the
            keys forward) takes every query at once, its visibility read a block of rows at a time
            (ctx.seen_rows): no (Tq, Tk) mask.
  chunks    a bias that reads the query position (FIRE past its L: no view) at increasing positions:
            the forward runs through a KV cache by chunks of query rows, so that each chunk's bias is
            made once for every layer (they share the chunk's plan). Exact; O(H rows T) memory.

Measurements (CPU, 2 cores): benchmarks/long-context.md. Tensor contract as model.attend's: q (B, H, Tq, D),
k and v (B, H, Tk, D) -> (B, H, Tq, D).
"""
import torch
from torch.nn import functional as F

from positional.base import Ctx, distance, join

ATTENTION_BLOCK = 1024   # queries past which a forward without gradients takes this engine
BLOCK_SCORES = 2 ** 22   # "blocks": query rows a block, fewer where B H rows Tk would pass 2^22
KERNELS = ("blocks", "relative", "banded", "own_blocks")


def attend(q, k, v, plan, layer, short):
    """Attention by the engine's kernel plan.kernel; short(q, k, v, plan, layer): the model's attend, for a block."""
    if plan.kernel == "relative":
        return attend_by_distance(plan.pe, q, k, v, causal_blocks(q.shape[2]))
    if plan.kernel == "banded":
        return attend_banded(plan.pe, q, k, v, plan, layer)
    if plan.kernel == "own_blocks":
        return plan.pe.attend(q, k, v, plan, layer)
    return by_blocks(q, k, v, plan, lambda q, k, v, p: short(q, k, v, p, layer))


def row_block(B, H, Tk):
    """Query rows a block: ATTENTION_BLOCK, fewer where B H rows Tk scores would pass BLOCK_SCORES (16 MB)."""
    return min(ATTENTION_BLOCK, max(16, BLOCK_SCORES // (B * H * Tk)))


def by_blocks(q, k, v, plan, attend_block):
    """attend_block(q rows a:b, their keys, values, the block's plan) by blocks of row_block() queries; over own
    keys (plan.causal) each block takes the keys up to its last row."""
    B, H, T, _ = q.shape
    rows = row_block(B, H, k.shape[2])
    ys = []
    for a in reversed(range(0, T, rows)):   # the most keys first: each block's scores then fit in the last's
        p = plan.block(a, min(a + rows, T))
        n = len(p.k_pos)
        ys.append(attend_block(q[:, :, a:a + rows], k[:, :, :n], v[:, :, :n], p))   # (B, H, rows, D)
    return torch.cat(ys[::-1], dim=2)                                                 # (B, H, Tq, D)


def causal_blocks(T):
    """Query blocks over own keys, each needing keys up to its last row: 2 blocks do 3/4 of the products, 4 do 5/8."""
    n = max(1, min(4, T // 64))
    edges = [T * i // n for i in range(n + 1)]
    return list(zip(edges[:-1], edges[1:]))


def row_blocks(T, rows):
    """Query blocks of `rows` rows (the last fewer) over own keys, each needing keys up to its last row."""
    return [(a, min(a + rows, T)) for a in range(0, T, rows)]


def hankel(u, rows, cols, start=0):
    """(1, H, rows, cols) view of u (H, n) whose element [h, r, j] is u[h, start + r + j] (constant along the
    anti-diagonals): overlapping strides, no copy. SDPA's CPU kernel takes it as its mask."""
    return u.as_strided((1, u.shape[0], rows, cols), (0, u.stride(0), 1, 1), u.storage_offset() + start)


def attend_by_distance(pe, q, k, v, blocks):
    """Causal attention over consecutive positions, pe.score_bias read by distance (relative_bias), each block's
    bias a Hankel view of one vector per head. blocks: query rows [a, b), each over the keys up to row b."""
    n, T = max(b - a for a, b in blocks), q.shape[2]
    d = torch.arange(1 - n, T, device=q.device)                              # every distance, future ones first
    h = torch.arange(q.shape[1], device=q.device)[:, None]
    u = pe.score_bias(h, (d + n)[None], torch.full_like(d, n)[None])          # (H, n + T - 1): q - k = d
    u = u.to(q.dtype).masked_fill(d < 0, float("-inf")).contiguous()
    ys = []
    for a, b in blocks:   # query r, reversed key j' (key b - 1 - j'): d = r - b + 1 + j', u's column n - b + r + j'
        bias = hankel(u, b - a, b, n - b + a)
        keys, values = k[:, :, :b].flip(2), v[:, :, :b].flip(2)
        ys.append(F.scaled_dot_product_attention(q[:, :, a:b], keys, values, attn_mask=bias))   # (B, H, b - a, D)
    return torch.cat(ys, dim=2)                                                  # (B, H, Tq, D)


def sub_ctx(ctx, a, b, first, end):
    """The ctx of queries a:b over the keys first:end (consecutive positions, no window), sharing ctx's memo."""
    return Ctx(ctx.q_pos[a:b], ctx.k_pos[first:end], n_positions=ctx.n_positions, rows=slice(a, b),
               memo=ctx.memo)


def attend_banded(pe, q, k, v, ctx, layer, rows=1024, near_rows=256):
    """Causal attention over consecutive positions (no cache, window, documents or gradients) with pe's logits
    formed only for the band of keys less than W = pe.band behind each query (near_band), the far keys
    (j <= i - W) by the CPU flash kernel on pe.far()'s queries and keys, per block of `rows` queries: the keys
    before the block's, then a causal square. The softmaxes over the parts are joined by their log-sum-exps:
    O(T (near_rows + W)) logits, none (T, T)."""
    T = q.shape[2]
    W = min(pe.band, T)
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu   # (out, log-sum-exp)
    out = []
    for a in range(0, T, rows):
        b = min(a + rows, T)
        y, lse, holds = near_band(pe, q, k, v, layer, ctx, a, b, W, near_rows) if W else (None, None, None)
        c = max(a, W)   # the block's first query with far keys
        if c < b:
            blk = sub_ctx(ctx, a, b, 0, b - W)
            qa, ka, va, r = pe.far(q[:, :, a:b], k[:, :, :b - W], v[:, :, :b - W], blk, layer)
            qa = qa[:, :, c - a:]
            va = F.pad(va, (0, qa.shape[-1] - va.shape[-1]))   # as wide as the queries: the fused kernel
            yf, lf = flash(qa, ka[:, :, c - W:], va[:, :, c - W:], is_causal=True, scale=1.0)   # the square
            if c > W:   # the keys before the square, seen by every query of it
                yf, lf = join(yf, lf, *flash(qa, ka[:, :, :c - W], va[:, :, :c - W], scale=1.0))
            yf = yf[..., :v.shape[-1]]
            lf = lf + r[:, :, c - a:]
            if y is None:
                y, lse = yf, lf
            else:
                y[:, :, c - a:], lse[:, :, c - a:] = join(y[:, :, c - a:], lse[:, :, c - a:], yf, lf)
        for s in range(c, b, 64) if holds is not None else ():   # rows whose far keys are not all far: exact
            e = min(s + 64, b)
            if not bool(holds[..., s - a:e - a].all()):
                exact = sub_ctx(ctx, s, e, 0, e)
                y[:, :, s - a:e - a] = pe.attend(q[:, :, s:e], k[:, :, :e], v[:, :, :e], exact, layer)
        out.append(y.to(v.dtype))
    return torch.cat(out, 2)                                                 # (B, H, T, D)


def near_band(pe, q, k, v, layer, ctx, a, b, W, near_rows):
    """(y, log-sum-exp, far_holds or None) of queries a:b over their keys less than W behind, by blocks of
    near_rows queries."""
    ys, lses, holds = [], [], []
    for s in range(a, b, near_rows):
        e = min(s + near_rows, b)
        first = max(0, s - W + 1)
        near = sub_ctx(ctx, s, e, first, e)
        d = distance(near.q_pos, near.k_pos)
        logits = pe.logits(q[:, :, s:e], k[:, :, first:e], near, layer).float()
        logits = logits.masked_fill((d < 0) | (d >= W), float("-inf"))        # (B, H, e - s, e - first)
        lse = logits.logsumexp(-1)
        probs = torch.exp(logits - lse[..., None]).to(v.dtype)
        y = probs @ v[:, :, first:e]
        t = pe.value_term(probs, near, layer)
        ys.append(y if t is None else y + t)
        lses.append(lse)
        holds.append(pe.far_holds(q[:, :, s:e], k[:, :, first:e], near, layer))
    held = None if holds[0] is None else torch.cat(holds, 2)
    return torch.cat(ys, 2).float(), torch.cat(lses, 2), held


def chunked(model, pos, plans):
    """Whether a forward without a cache goes by_chunks: a plan goes by blocks with a bias (not own logits),
    the keys can be cached (the static step applies) and the positions are in order."""
    blocks = any(p.kernel == "blocks" and not p.pe.overrides("attend") for p in plans.values())
    return blocks and model.static_decoding and bool((pos.diff() > 0).all())


def by_chunks(model, idx, pos, n_positions, doc, places=None):
    """model.run through a KV cache (a slot per position) by chunks of query rows: (B, T, vocab) logits."""
    B, T = idx.shape
    rows = row_block(B, model.config.n_head, T)
    cache = model.new_cache(B, n_positions, ring=False)
    ys = []
    for a in range(0, T, rows):
        part = None if doc is None else doc[a:a + rows]
        part_places = None if places is None else places[:, a:a + rows]
        ys.append(model.run(idx[:, a:a + rows], pos[a:a + rows], n_positions, cache, part, places=part_places))
    return torch.cat(ys, 1)                                                     # (B, T, vocab)
