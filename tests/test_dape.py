"""DAPE (positional/dape.py): the logits against the paper's per-pair MLP written out, the prior's encoding
when f is zero, causality, cache == recompute for both priors, shift invariance, the long-evaluation path,
bad input. The registry-wide contract (tests/test_contract.py, test_encodings.py) covers it too."""
import math

import pytest
import torch

from positional.alibi import alibi_slopes
from positional.base import Ctx
from training.config import ConfigError, load_config
from tests.conftest import assert_decodes_like_a_recompute, tiny_gpt

PRIORS = ["kerple", "alibi"]


def zero_f(model):
    for first, _, second in model.pe.mlp:
        second.weight.data.zero_()
        second.bias.data.zero_()


@pytest.mark.parametrize("prior", PRIORS)
def test_with_f_zeroed_it_is_its_prior_encoding(prior):
    """W2 = 0, b2 = 0: the whole model's logits are those of the prior's own encoding with the same weights."""
    dape = tiny_gpt("dape", dape_prior=prior)
    zero_f(dape)
    plain = tiny_gpt(prior)
    state = {k: v for k, v in dape.state_dict().items() if not k.startswith("pe.")}
    state.update({f"pe.{k}": v for k, v in dape.pe.prior.state_dict().items()})   # Kerple's r1, r2 (ALiBi: none)
    plain.load_state_dict(state)
    idx = torch.randint(0, 40, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(dape(idx)[0], plain(idx)[0], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(tiny_gpt("dape", dape_prior=prior)(idx)[0], plain(idx)[0], atol=1e-3)   # f matters


@pytest.mark.parametrize("prior", PRIORS)
def test_logits_equal_the_per_pair_mlp_on_the_concatenated_heads(prior):
    """logits_ij = A_ij + B_ij + MLP([A_ij; B_ij]) at every seen pair, the MLP called on one (2H,) vector at a time."""
    pe = tiny_gpt("dape", dape_prior=prior, n_head=4).pe
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 4, 5, 8, generator=g), torch.randn(1, 4, 7, 8, generator=g)
    q_pos, k_pos = torch.arange(2, 7), torch.arange(0, 7)
    with torch.no_grad():
        got = pe.logits(q, k, Ctx(q_pos, k_pos), layer=1)
        r1, r2 = pe.prior.params() if prior == "kerple" else (None, None)
        for i in range(5):
            for j in range(int(q_pos[i]) + 1):
                d = float(q_pos[i] - k_pos[j])
                b = -r1 * torch.log1p(r2 * torch.tensor(d)) if prior == "kerple" else -alibi_slopes(4) * d
                a = (q[0, :, i] * k[0, :, j]).sum(-1) / math.sqrt(8)
                want = a + b + pe.mlp[1](torch.cat([a, b]))
                torch.testing.assert_close(got[0, :, i, j], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("prior", PRIORS)
def test_a_later_token_changes_no_earlier_logit(prior):
    model = tiny_gpt("dape", dape_prior=prior)
    idx = torch.randint(0, 40, (1, 16), generator=torch.Generator().manual_seed(2))
    other = idx.clone()
    other[0, 9:] = (other[0, 9:] + 7) % 40
    with torch.no_grad():
        a, b = model(idx)[0], model(other)[0]
    torch.testing.assert_close(a[:, :9], b[:, :9], rtol=0, atol=0)
    assert not torch.allclose(a[:, 9:], b[:, 9:])


@pytest.mark.parametrize("prior", PRIORS)
def test_cached_decoding_equals_recompute(prior):
    """A cache larger than the sequence: its empty slots (position 2^30) never reach f."""
    model = tiny_gpt("dape", dape_prior=prior)
    idx = torch.randint(0, 40, (2, 20), generator=torch.Generator().manual_seed(3))
    assert_decodes_like_a_recompute(model, idx, prefill=6, max_len=64)


@pytest.mark.parametrize("prior", PRIORS)
def test_logits_are_invariant_to_shifting_every_position(prior):
    model = tiny_gpt("dape", dape_prior=prior)
    idx = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(4))
    pos = torch.arange(12)
    with torch.no_grad():
        torch.testing.assert_close(model(idx, pos=pos)[0], model(idx, pos=pos + 1000)[0], rtol=1e-4, atol=1e-5)


def test_a_long_evaluation_by_blocks_equals_the_full_forward():
    """Past 1024 queries without gradients the model attends by query blocks (attention/long_cpu.py): the same
    logits as the forward with gradients on (own logits over causal blocks)."""
    model = tiny_gpt("dape", n_layer=1)
    idx = torch.randint(0, 40, (1, 1100), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        blocks = model(idx)[0]
    full = model(idx)[0].detach()
    torch.testing.assert_close(blocks, full, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("args, says", [
    (["--dape_prior=fire"], "dape_prior must be one of kerple, alibi"),
    (["--dape_width=0"], "dape_width must be >= 1"),
    (["--dape_prior=alibi", "--kerple_variant=power"], "kerple_variant='power' is the Kerple prior's kernel"),
])
def test_bad_settings_are_refused_in_one_line(args, says):
    with pytest.raises(ConfigError) as e:
        load_config(["--pos_encoding=dape", *args])
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_protocol_config_trains_at_128_and_evaluates_to_64_times_that():
    import compare
    settings, _, cfg = compare.parse(["configs/dape_protocol.py"])
    assert cfg.block_size == 128 and max(settings["eval_lengths"]) == 64 * 128
    assert settings["encodings"][:2] == ["dape", "dape_alibi"] and "kerple" in settings["encodings"]
