"""The weight-decay rule (model.configure_optimizers): decay on the transformer's matrices only,
never on biases, norms, or any parameter of the positional encoding, whatever its shape."""
import pytest
import torch

import positional
from tests.conftest import tiny_gpt


@pytest.mark.parametrize("name", list(positional.REGISTRY))
def test_decay_falls_on_transformer_matrices_and_never_on_the_encoding(name):
    """With zero gradients AdamW's step is zero, so one step leaves exactly the decay:
    p <- p * (1 - lr * weight_decay) on the decayed parameters, p unchanged on the others."""
    model = tiny_gpt(name, bias=True)
    lr, wd = 0.1, 0.5
    opt = model.configure_optimizers(wd, lr, (0.9, 0.99), "cpu")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    pe = {id(p) for p in model.pe.parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    decayed = 0
    for n, p in model.named_parameters():
        if id(p) in pe or p.dim() < 2:  # the encoding's tables, slopes, MLPs; biases and norms
            torch.testing.assert_close(p.detach(), before[n], rtol=0, atol=0, msg=f"{n} was decayed")
        else:
            torch.testing.assert_close(p.detach(), before[n] * (1 - lr * wd), rtol=1e-6, atol=0, msg=n)
            decayed += 1
    assert decayed >= 1 + 2 * 4  # wte (tied to lm_head); c_attn, c_proj, c_fc, c_proj in each of 2 layers


def test_every_parameter_is_in_exactly_one_group():
    model = tiny_gpt("transformer_xl")
    groups = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu").param_groups
    ids = [id(p) for g in groups for p in g["params"]]
    assert sorted(ids) == sorted(id(p) for p in model.parameters())
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
