"""The contract every registered encoding keeps, at tiny size, in the fast lane (`pytest -m "not slow"`):
relative encodings' shift invariance, one training step, bad input refused in one line. The forward
(causality) and cache-equals-recompute checks over the whole registry are tests/test_encodings.py's
test_causality and test_kv_cache_matches_full_forward; a new encoding joins all of them by its registry line."""
import dataclasses

import pytest
import torch

import positional
from training.config import ConfigError, load_config
from tests.conftest import tiny_gpt

ALL = list(positional.REGISTRY)
# Relative: nothing added to the token embeddings, so positions reach the scores only through rotate,
# score_bias or attend, each a function of q_pos - k_pos.
RELATIVE = [n for n in ALL if not positional.REGISTRY[n].overrides("embed")]


@pytest.mark.parametrize("name", RELATIVE)
def test_relative_encodings_give_the_same_logits_at_shifted_positions(name):
    """The whole model's logits at positions 0..11 and at 29..40 are the same."""
    model = tiny_gpt(name, n_layer=1, block_size=64)
    if name == "fire":
        model.pe.L_multiplier.data.fill_(1.0)   # FIRE is relative below its threshold L (here 64, past every position)
    idx = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(12)
    with torch.no_grad():
        a, b = model(idx, pos=pos)[0], model(idx, pos=pos + 29)[0]
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_one_training_step_lowers_the_loss_and_trains_the_encoding(name):
    """One AdamW step (the model's own optimizer groups) on one batch: every parameter had a finite
    gradient, the loss on that batch falls, and each of the encoding's parameters moved."""
    model = tiny_gpt(name, n_layer=1).train()
    opt = model.configure_optimizers(0.1, 1e-2, (0.9, 0.99), "cpu")
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 40, (4, 12), generator=g), torch.randint(0, 40, (4, 12), generator=g)
    before = {n: p.detach().clone() for n, p in model.pe.named_parameters()}
    loss = model(x, y)[1]
    loss.backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n
    opt.step()
    with torch.no_grad():
        after = model(x, y)[1]
    assert after < loss - 0.05, (loss.item(), after.item())
    for n, p in model.pe.named_parameters():
        assert not torch.equal(p, before[n]), f"{n} did not move"


def bounded(cls):
    """(setting name, a value just past its declared bound) for each bounded setting of cls."""
    for f in dataclasses.fields(cls.Settings):
        m = f.metadata
        if m.get("choices"):
            yield f.name, "'no_such_choice'"
        elif m.get("at_least") is not None:
            yield f.name, repr(type(f.default)(m["at_least"] - 1))
        elif m.get("above") is not None:
            yield f.name, repr(type(f.default)(m["above"]))


@pytest.mark.parametrize("name", ALL)
def test_bad_settings_are_refused_in_one_line(name):
    """A setting of another encoding, and each of its own settings past its bound, give one line naming the
    key; explicit positions that go back are refused by the model."""
    keys = positional.setting_keys()
    other = next(k for k, (_, owners) in keys.items() if name not in owners and set(owners) <= set(ALL))
    cases = [(other, "1", f"{other} is a setting of")] + [(k, v, f"{k} must be") for k, v in
                                                            bounded(positional.REGISTRY[name])]
    task = ["--task=addition"] if positional.reads_places(positional.REGISTRY[name]) else []   # its places' source
    for key, value, says in cases:
        with pytest.raises(ConfigError) as e:
            load_config([f"--pos_encoding={name}", f"--{key}={value}", *task])
        assert says in str(e.value) and "\n" not in str(e.value), (key, str(e.value))
    with pytest.raises(ValueError, match="must be >= 0 and increasing"):
        tiny_gpt(name, n_layer=1)(torch.zeros(1, 4, dtype=torch.long), pos=torch.tensor([0, 2, 1, 3]))
