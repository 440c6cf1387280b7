"""Training by recomputed query blocks (recompute_rows, positional/base.py; issue #52): an encoding that asks for it
attends in training by blocks of that many query rows, each recomputed in its backward, so that no (Tq, Tk) tensor
is made and memory grows linearly in T (measured: docs/speed.md). The blocks give the dense path's loss and
gradients, and compiled (torch.compile, train.py's --compile=True) eager's."""
import math
import re

import pytest
import torch

import model as model_mod
import positional
from tests.conftest import TINY_ARGS, run_py, tiny_gpt
from tests.test_long import LargestTensor

RECOMPUTED = [n for n, cls in positional.REGISTRY.items() if cls.recompute_rows]


def test_cope_trains_by_recomputed_blocks():
    assert "cope" in RECOMPUTED


def double_gpt(name, T=100, **kw):
    """A float64 tiny_gpt in training mode whose attention is far from uniform (large query/key weights)."""
    m = tiny_gpt(name, block_size=T, **kw).double().train()
    with torch.no_grad():
        for block in m.h:
            block.attn.c_attn.weight.normal_(0, 0.3)
    return m


def loss_and_grads(m, rows, x, y, through=None, **kw):
    """(loss, {name: gradient}) of one forward and backward, the encoding attending by blocks of `rows` query rows
    recomputed in backward (0: the capability off, the dense path); through: what runs m (torch.compile's), or m."""
    m.pe.recompute_rows = rows
    m.zero_grad(set_to_none=True)
    loss = (m if through is None else through)(x, y, **kw)[1]
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", RECOMPUTED)
@pytest.mark.parametrize("window, sinks, docs", [(0, 0, False), (7, 2, False), (0, 0, True)])
def test_recomputed_blocks_equal_the_dense_path(name, window, sinks, docs):
    """float64, 100 tokens: blocks of 16 rows (the last of 4) and of 30 (the last of 10) give the loss and every
    gradient of one dense square, with a window and sinks, and with three documents."""
    m = double_gpt(name, window=window, sinks=sinks)
    x, y = torch.randint(40, (2, 2, 100), generator=torch.Generator().manual_seed(1))
    kw = dict(doc=torch.arange(100) * 3 // 100) if docs else {}
    dense_loss, dense = loss_and_grads(m, 0, x, y, **kw)
    assert set(dense) >= {"pe.emb", "h.0.attn.c_attn.weight"}
    for rows in (16, 30):
        loss, grads = loss_and_grads(m, rows, x, y, **kw)
        torch.testing.assert_close(loss, dense_loss, rtol=1e-12, atol=1e-12)
        for n in dense:
            torch.testing.assert_close(grads[n], dense[n], rtol=1e-10, atol=1e-12, msg=lambda s: f"{n}: {s}")


@pytest.mark.parametrize("name", RECOMPUTED)
def test_recomputed_blocks_are_causal(name):
    """Blocks of 16 rows: other tokens from position 50 on change neither the logits before 50 nor the gradients of
    a loss on them."""
    m = double_gpt(name)
    m.pe.recompute_rows = 16
    x = torch.randint(40, (2, 100), generator=torch.Generator().manual_seed(2))
    later = x.clone()
    later[:, 50:] = (later[:, 50:] + 1) % 40
    outs = []
    for idx in (x, later):
        m.zero_grad(set_to_none=True)
        logits = m(idx, torch.zeros_like(idx))[0][:, :50]        # (B, 50, vocab): targets ask for every position
        logits.logsumexp(-1).sum().backward()
        outs.append((logits.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}))
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-12, atol=1e-12)
    for n in outs[0][1]:
        torch.testing.assert_close(outs[1][1][n], outs[0][1][n], rtol=1e-10, atol=1e-12, msg=lambda s: f"{n}: {s}")
    assert not torch.equal(m(later)[0][:, 50:], m(x)[0][:, 50:])   # the later tokens do change the later logits


@pytest.mark.parametrize("name", RECOMPUTED)
def test_a_recomputed_block_draws_the_forwards_dropout_again(name, monkeypatch):
    """Attention dropout 0.3: from one seed, the gradients of blocks recomputed in backward equal those of the same
    blocks kept from the forward (their dropout masks drawn again, not anew)."""
    m = double_gpt(name, dropout=0.3)
    x, y = torch.randint(40, (2, 2, 100), generator=torch.Generator().manual_seed(3))
    torch.manual_seed(4)
    recomputed = loss_and_grads(m, 16, x, y)
    monkeypatch.setattr(model_mod, "checkpoint", lambda f, *args, use_reentrant: f(*args))   # the blocks kept
    torch.manual_seed(4)
    kept = loss_and_grads(m, 16, x, y)
    torch.testing.assert_close(recomputed[0], kept[0], rtol=0, atol=0)
    for n in kept[1]:
        torch.testing.assert_close(recomputed[1][n], kept[1][n], rtol=1e-12, atol=1e-14, msg=lambda s: f"{n}: {s}")


@pytest.mark.parametrize("name", RECOMPUTED)
def test_no_training_tensor_of_t_squared(name):
    """A 1-layer, 2-head, 16-wide model trained at 1,024 tokens, blocks of 64 rows: the largest tensor of its forward
    and backward is a block's (H, 64, Tk) (within a column: CoPE's table), not the (H, T, T) scores (2^21)."""
    T = 1024
    m = tiny_gpt(name, n_layer=1, n_head=2, n_embd=16, block_size=T).train()
    m.pe.recompute_rows = 64
    x = torch.randint(40, (1, T))
    with LargestTensor() as seen:
        m(x, x)[1].backward()
    assert m.pe.emb.grad.abs().sum() > 0
    assert seen.largest <= 2 * 64 * (T + 2), seen.largest


@pytest.mark.slow
@pytest.mark.parametrize("name", RECOMPUTED)
def test_compiled_recomputed_blocks_equal_eager(name):
    """torch.compile of the model (train.py's --compile=True), blocks of 16 rows: two forward and backward passes at 48
    tokens (3 blocks) and one at 40 (the recompiled shape, its last block 8 rows) give eager's loss and gradients."""
    torch._dynamo.reset()
    m = tiny_gpt(name, n_layer=1, n_head=2, n_embd=16, block_size=48).train()
    with torch.no_grad():
        m.h[0].attn.c_attn.weight.normal_(0, 0.3)                   # attention far from uniform
    compiled = torch.compile(m)
    for seed, T in [(5, 48), (6, 48), (7, 40)]:
        x, y = torch.randint(40, (2, 2, T), generator=torch.Generator().manual_seed(seed))
        eager_loss, eager = loss_and_grads(m, 16, x, y)
        loss, grads = loss_and_grads(m, 16, x, y, through=compiled)
        assert set(grads) == set(eager) >= {"pe.emb", "h.0.attn.c_attn.weight"}
        torch.testing.assert_close(loss, eager_loss)
        for n in eager:
            torch.testing.assert_close(grads[n], eager[n], msg=lambda s: f"T={T}, {n}: {s}")


@pytest.mark.slow
def test_cope_trains_compiled(tiny_data, tmp_path):
    """train.py --pos_encoding=cope --compile=True, 5 iterations at 16 tokens (one block, recomputed in backward):
    it finishes, every logged loss finite."""
    r = run_py("train.py", "configs/cope.py", *TINY_ARGS, "--max_iters=5", "--eval_interval=5", "--log_interval=1",
               "--compile=True", f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", timeout=240)
    losses = [float(v) for v in re.findall(r"^iter \d+/5: loss (\S+),", r.stdout, re.M)]
    assert len(losses) == 5 and all(math.isfinite(v) for v in losses), r.stdout[-2000:]
    assert "done: 5 iterations" in r.stdout
