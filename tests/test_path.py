"""PaTH attention (positional/path.py): the blockwise path against the explicit products (values and gradients),
the identity transform giving plain softmax attention, a fixed reflection by hand, a long cached prefill by row
blocks, and the low-rank W (path_w_rank: its rank, parameters, refusals and checkpoints). Causality, cache ==
recompute (windows, documents), shift invariance and a training step come from the tests parametrised over
positional.REGISTRY (tests/test_encodings.py's FORMS, path_w_rank=4 among them)."""
import dataclasses
import math

import pytest
import torch
from torch.nn import functional as F

from positional.base import Ctx
from positional.path import KEY_CHUNK, path_blocks, path_reference
from tests.conftest import tiny_gpt
from training import checkpoint
from training.config import ConfigError, load_config


def inputs(T=11, D=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q, k, v, w = (torch.randn(2, 3, T, D, generator=g, dtype=dtype) for _ in range(4))
    return q, k, v, F.normalize(w, dim=-1), 2 * torch.rand(2, 3, T, generator=g, dtype=dtype)


def blockwise(q, k, v, w, beta, seen, block, a=0, slots=False, chunk=KEY_CHUNK):
    """path_blocks of the queries from row a: the forward's own keys (growing), or (slots) keys in cache slots, here
    reversed (token t in slot T-1-t), the state starting at zeros; the keys in pieces of `chunk`."""
    if not slots:
        return path_blocks(q[:, :, a:], k, v, w, beta, rows_of(seen[a:]), k[:, :, :0], None, a, block, chunk=chunk)[0]
    at = torch.arange(k.shape[2] - 1, -1, -1)
    return path_blocks(q[:, :, a:], k[:, :, at], v[:, :, at], w, beta, rows_of(seen[a:][..., at]), torch.zeros_like(k),
                       at, a, block, chunk=chunk)[0]


def rows_of(seen):
    """path_blocks' seen_rows(i, j) of a (Tq, Tk) mask: its rows i..j-1."""
    return lambda i, j: seen[..., i:j, :]


@pytest.mark.parametrize("slots", [False, True], ids=["own", "slots"])
@pytest.mark.parametrize("block", [1, 3, 4, 64])
@pytest.mark.parametrize("kw", [{}, dict(window=4, sinks=1)], ids=["causal", "window"])
def test_blockwise_equals_the_explicit_products(block, kw, slots):
    """Values (float64, to 1e-12) and the gradients of q, k, v, w and beta (to 1e-10), over blocks that split the
    11 tokens unevenly, and for the queries from row 5 on (the keys before them carried); the keys in order or in
    slots of a cache out of order."""
    q, k, v, w, beta = (t.requires_grad_() for t in inputs())
    pos = torch.arange(11)
    seen = Ctx(pos, pos, **kw).visible()
    ref = path_reference(q, k, v, w, beta, seen)
    y = blockwise(q, k, v, w, beta, seen, block, slots=slots)
    torch.testing.assert_close(y, ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(blockwise(q, k, v, w, beta, seen, block, 5, slots), ref[:, :, 5:], rtol=0, atol=1e-12)
    up = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=ref.dtype)
    want = torch.autograd.grad((ref * up).sum(), (q, k, v, w, beta))
    got = torch.autograd.grad((y * up).sum(), (q, k, v, w, beta))
    for g_ref, g in zip(want, got):
        torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("slots", [False, True], ids=["own", "slots"])
def test_keys_in_several_pieces_equal_the_explicit_products(slots):
    """Past KEY_CHUNK keys the carried keys are met a piece at a time, joined by an online softmax: here 40 tokens in
    blocks of 3 over pieces of 8 keys (an uneven last block and piece), with a window of 12, a sink and three documents
    (pieces that a query sees none of), equal the definition (float64, values to 1e-12, gradients to 1e-10), also
    for the queries from row 17 on."""
    q, k, v, w, beta = (t.requires_grad_() for t in inputs(T=40, D=4, seed=4))
    pos = torch.arange(40)
    doc = torch.tensor([0] * 9 + [1] * 20 + [2] * 11)
    seen = Ctx(pos, pos, window=12, sinks=1, doc=doc).visible()
    ref = path_reference(q, k, v, w, beta, seen)
    y = blockwise(q, k, v, w, beta, seen, 3, slots=slots, chunk=8)
    torch.testing.assert_close(y, ref, rtol=0, atol=1e-12)
    late = blockwise(q, k, v, w, beta, seen, 3, 17, slots, chunk=8)
    torch.testing.assert_close(late, ref[:, :, 17:], rtol=0, atol=1e-12)
    up = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=ref.dtype)
    want = torch.autograd.grad((ref * up).sum(), (q, k, v, w, beta))
    got = torch.autograd.grad((y * up).sum(), (q, k, v, w, beta))
    for g_ref, g in zip(want, got):
        torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-10)


def test_float32_blockwise_is_within_1e_4_of_float64():
    q, k, v, w, beta = inputs(T=40, D=8, seed=2)
    pos = torch.arange(40)
    seen = Ctx(pos, pos).visible()
    ref = path_reference(q, k, v, w, beta, seen)
    y = blockwise(*(t.float() for t in (q, k, v, w, beta)), seen, 16)
    torch.testing.assert_close(y.double(), ref, rtol=0, atol=1e-4)


def test_identity_transforms_give_plain_softmax_attention():
    """beta = 0: every H_t = I, so the logits are q_i . k_j / sqrt(D), causal: SDPA's attention, no positions."""
    q, k, v, w, beta = inputs()
    pos = torch.arange(11)
    y = blockwise(q, k, v, w, torch.zeros_like(beta), Ctx(pos, pos).visible(), 4)
    torch.testing.assert_close(y, F.scaled_dot_product_attention(q, k, v, is_causal=True), rtol=0, atol=1e-12)


def test_a_fixed_reflection_by_hand():
    """D = 2, w = e_1 and beta = 2 at every token: H = diag(-1, 1), so key j meets query i through
    diag((-1)^(i-j), 1). With q = k = (1, 1) everywhere the logits are (1 + (-1)^(i-j)) / sqrt(2): sqrt(2) at even
    distances, 0 at odd ones. With e = exp(sqrt(2)): query 1 weighs keys 0, 1 as 1, e and query 2 keys 0, 1, 2 as
    e, 1, e, each over their sum."""
    T = 3
    q = k = torch.ones(1, 1, T, 2, dtype=torch.float64)
    v = torch.eye(3, dtype=torch.float64).view(1, 1, 3, 3)
    w = torch.tensor([1.0, 0.0], dtype=torch.float64).expand(1, 1, T, 2)
    beta = torch.full((1, 1, T), 2.0, dtype=torch.float64)
    pos = torch.arange(T)
    y = blockwise(q, k, v, w, beta, Ctx(pos, pos).visible(), 2)[0, 0]
    e = math.exp(math.sqrt(2))
    want = torch.tensor([[1, 0, 0], [1 / (e + 1), e / (e + 1), 0], [e / (2 * e + 1), 1 / (2 * e + 1), e / (2 * e + 1)]],
                        dtype=torch.float64)
    torch.testing.assert_close(y, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("rank", [0, 4])
def test_a_long_cached_prefill_by_row_blocks_continues_like_the_forward(rank):
    """Past 1,024 queries without gradients the model attends by row blocks, the last first: with a cache the keys
    as they were before the call serve every block, and the keys carried past the call serve the next steps."""
    model = tiny_gpt("path", n_layer=1, block_size=16, path_w_rank=rank)
    idx = torch.randint(0, 40, (1, 1030), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full = model(idx)[0]
        model.setup_cache(1, 1030)
        steps = torch.cat([model(idx[:, :1027])[0]] + [model(idx[:, t:t + 1])[0] for t in range(1027, 1030)], 1)
    torch.testing.assert_close(steps, full, rtol=1e-4, atol=1e-4)


def test_the_rows_a_block_sees_are_the_whole_masks_rows():
    """Ctx.seen_rows(a, b), what path_blocks reads a block at a time (no (Tq, Tk) mask in a long evaluation): the rows
    a:b of visible(), with a window, sinks and documents, for a ctx covering rows 4.. of a forward."""
    pos = torch.cat([torch.arange(9), torch.arange(11)])
    doc = torch.tensor([0] * 9 + [1] * 11)
    whole = Ctx(pos, pos, window=5, sinks=1, doc=doc)
    part = Ctx(pos[4:], pos, window=5, sinks=1, doc=doc, rows=slice(4, 20))
    for a, b in [(0, 3), (3, 9), (9, 16)]:
        torch.testing.assert_close(part.seen_rows(a, b), whole.visible()[4 + a:4 + b], rtol=0, atol=0)


def w_matrix(pe, layer, C=32):
    """The matrix (C, H*D) of the map x -> W x that makes the Householder vectors: W applied to each unit vector
    (float64: projected computes in its input's dtype)."""
    return pe.projected(torch.eye(C, dtype=torch.float64)[None], layer)[0]


@pytest.mark.parametrize("rank", [1, 4, 31])
def test_the_low_rank_w_has_rank_r_and_r_times_c_plus_hd_parameters(rank):
    """path_w_rank=r: W = W_up W_down, a map of rank r (C = H*D = 32 here; the full-rank W's is 32) with
    r (C + H*D) parameters a layer in place of C H*D, the rest of the encoding unchanged."""
    full, low = tiny_gpt("path").pe, tiny_gpt("path", path_w_rank=rank).pe
    for layer in range(2):
        assert torch.linalg.matrix_rank(w_matrix(low, layer)) == rank
        assert torch.linalg.matrix_rank(w_matrix(full, layer)) == 32
    count = lambda pe: sum(p.numel() for p in pe.parameters())
    assert count(full) - count(low) == 2 * (32 * 32 - rank * (32 + 32))


@pytest.mark.parametrize("argv, message", [
    (["--path_w_rank=-1"], "path_w_rank must be >= 0 (rank of the map W making w; 0: full rank, r > 0: C -> r -> "
                           "H*D), got -1"),
    (["--path_w_rank=2.5"], "config key 'path_w_rank' wants an integer, got 2.5"),
    (["--path_w_rank=four"], "config key 'path_w_rank' wants an integer, got 'four'"),
    (["--path_w_rank=32"], "path_w_rank=32 is not below n_embd=32, so W would not be low-rank; use path_w_rank=0 for "
                           "the full-rank W, or a rank below 32"),
    (["--pos_encoding=rope", "--path_w_rank=4"], "path_w_rank is a setting of path; this run uses rope"),
])
def test_a_bad_rank_is_one_line_naming_the_key_and_the_fix(argv, message):
    with pytest.raises(ConfigError) as e:
        load_config(["--pos_encoding=path", "--n_embd=32", "--n_head=4", *argv])
    assert message in str(e.value) and "\n" not in str(e.value)


def saved_and_loaded(model, tmp_path, pos_settings=None):
    """The model rebuilt from a checkpoint of it (training.checkpoint's save and load_model), its saved settings
    replaced by pos_settings if given."""
    args = dataclasses.asdict(model.config)
    if pos_settings is not None:
        args["pos_settings"] = pos_settings
    ckpt = dict(model=model.state_dict(), model_args=args, config={}, iter_num=0)
    checkpoint.save(ckpt, checkpoint.path_in(tmp_path))
    return checkpoint.load_model(tmp_path)[0]


def test_a_checkpoint_keeps_the_rank_and_one_saved_before_it_is_full_rank(tmp_path):
    """A path_w_rank=4 model comes back from its checkpoint with rank 4 and the same logits; a checkpoint whose
    settings predate path_w_rank (no such key) comes back full-rank, its weights loaded as they were."""
    idx = torch.randint(0, 40, (1, 12), generator=torch.Generator().manual_seed(5))
    low = tiny_gpt("path", path_w_rank=4)
    back = saved_and_loaded(low, tmp_path / "low")
    assert back.config.pos_settings["path_w_rank"] == 4 and torch.linalg.matrix_rank(w_matrix(back.pe, 0)) == 4
    old = tiny_gpt("path")
    before = {k: v for k, v in old.config.pos_settings.items() if k != "path_w_rank"}
    old_back = saved_and_loaded(old, tmp_path / "old", before)
    assert old_back.config.pos_settings["path_w_rank"] == 0
    with torch.no_grad():
        assert torch.equal(back(idx)[0], low(idx)[0]) and torch.equal(old_back(idx)[0], old(idx)[0])
