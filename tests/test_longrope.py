"""LongRoPE (positional/rope_scaling/longrope.py): its frequencies and attention factor worked by hand, equal to
transformers' own (ROPE_INIT_FUNCTIONS["longrope"]) on both sides of the original length, a cached generation
across that length equal to recomputing the prefix, Hugging Face dicts in and out (logits parity with
transformers' Llama both ways, short and long), and bad factor lists refused in one line."""
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

import export
from positional.rope import rope_inv_freq
from positional.rope_scaling import METHODS
from positional.rope_scaling.hf import from_hf
from tests.conftest import assert_decodes_like_a_recompute, tiny_gpt
from tests.test_interop import ORIG, files, hf_llama, import_, logits_diff, posgpt_run
from training.config import ConfigError, load_config

PLAIN = torch.tensor([1.0, 0.5, 0.25, 0.125], dtype=torch.float64)   # head_dim 8, base 16: theta_j = 2^-j
SHORT, LONG = [1.0, 2.0, 4.0, 8.0], [2.0, 3.0, 5.0, 7.0]


def settings(**knobs):
    return METHODS["longrope"][1](**{f"rope_{k}": v for k, v in knobs.items()})


def test_short_factors_up_to_the_original_length_long_factors_past_it():
    s = settings(factor=4.0, original_max_position=16, short_factor=SHORT, long_factor=LONG)
    m = math.sqrt(1 + math.log(4) / math.log(16))                    # sqrt(1.5), on both sides of L
    for n in (0, 1, 16):
        got, scale = rope_inv_freq(8, 16.0, "longrope", s, seq_len=n)
        torch.testing.assert_close(got, torch.tensor([1.0, 0.25, 0.0625, 0.015625], dtype=torch.float64))
        assert scale == pytest.approx(math.sqrt(1.5)) and scale == pytest.approx(m)
    got, scale = rope_inv_freq(8, 16.0, "longrope", s, seq_len=17)
    torch.testing.assert_close(got, PLAIN / torch.tensor(LONG, dtype=torch.float64))
    assert scale == pytest.approx(math.sqrt(1.5))


def test_attention_factor_as_given_and_one_without_extension():
    _, given = rope_inv_freq(8, 16.0, "longrope", settings(factor=4.0, original_max_position=16, attention_factor=1.25))
    _, none = rope_inv_freq(8, 16.0, "longrope", settings(factor=1.0, original_max_position=16), seq_len=64)
    assert (given, none) == (1.25, 1.0)


def hf(dim, base, L, s, n, **params):
    cfg = LlamaConfig(hidden_size=dim * 2, num_attention_heads=2, max_position_embeddings=int(L * s),
                      rope_parameters=dict(rope_type="longrope", rope_theta=base, factor=s,
                                           original_max_position_embeddings=L, **params))
    inv, m = ROPE_INIT_FUNCTIONS["longrope"](cfg, "cpu", seq_len=n)
    return inv.double(), m


@pytest.mark.parametrize("dim, base, L, s", [(32, 1e4, 256, 4.0), (64, 5e5, 4096, 32.0), (16, 500.0, 100, 2.5)])
@pytest.mark.parametrize("attention", [None, 1.3])
def test_equals_transformers_on_both_sides_of_the_original_length(dim, base, L, s, attention):
    g = torch.Generator().manual_seed(dim)
    short = (1 + torch.rand(dim // 2, generator=g)).tolist()
    long = (1 + s * torch.rand(dim // 2, generator=g)).sort().values.tolist()
    extra = {} if attention is None else {"attention_factor": attention}
    for n in (None, L // 2, L, L + 1, 4 * L):
        want = hf(dim, base, L, s, n, short_factor=short, long_factor=long, **extra)
        got = rope_inv_freq(dim, base, "longrope", settings(factor=s, original_max_position=L, short_factor=short,
                                                            long_factor=long, attention_factor=attention or 0.0),
                            seq_len=n or 0)
        torch.testing.assert_close(got[0], want[0], rtol=2e-6, atol=0)   # transformers computes in float32
        assert got[1] == pytest.approx(want[1], rel=1e-12)


def longrope_gpt(**kw):
    return tiny_gpt("rope", rope_scaling="longrope", rope_factor=4.0, rope_short_factor=[1.0, 1.5, 2.0, 3.0],
                    rope_long_factor=[1.0, 2.0, 4.0, 8.0], **kw)


def test_within_the_original_length_short_factors_past_it_long_ones():
    """Short factors of 1 and an attention factor of 1: RoPE exactly up to L = block_size, not past it."""
    idx = torch.randint(0, 40, (2, 24))
    with torch.no_grad():
        plain = tiny_gpt("rope", block_size=16)(idx)[0]
        model = tiny_gpt("rope", block_size=16, rope_scaling="longrope", rope_factor=4.0, rope_attention_factor=1.0,
                         rope_short_factor=[1.0] * 4, rope_long_factor=[1.0, 2.0, 4.0, 8.0])
        assert model.pe.length_dependent
        assert torch.equal(model(idx[:, :16])[0], plain[:, :16])
        assert not torch.allclose(model(idx)[0][:, :16], plain[:, :16], rtol=0, atol=1e-5)   # all rows: long


def test_cached_decoding_across_the_original_length_equals_recomputing_the_prefix():
    """Keys cached raw and re-rotated with the list of the current length: each step equals a fresh forward over
    the whole prefix (one layer: deeper layers' cached values keep their own step's frequencies, as dynamic NTK)."""
    model = longrope_gpt(n_layer=1, block_size=8)
    idx = torch.randint(0, 40, (1, 20))
    with torch.no_grad():
        model.setup_cache(1, 20)
        steps = [model(idx[:, :4])[0][:, -1]] + [model(idx[:, t:t + 1])[0][:, -1] for t in range(4, 20)]
        model.clear_cache()
        fresh = [model(idx[:, :t + 1])[0][:, -1] for t in range(3, 20)]
    torch.testing.assert_close(torch.cat(steps), torch.cat(fresh), rtol=1e-5, atol=1e-5)


def test_two_layers_decode_like_one_forward_within_the_original_length():
    assert_decodes_like_a_recompute(longrope_gpt(block_size=32), torch.randint(0, 40, (2, 30)), prefill=5)


def test_hugging_face_dict_gives_the_flat_keys():
    d = {"rope_type": "longrope", "factor": 32.0, "original_max_position_embeddings": 4096, "short_factor": SHORT,
         "long_factor": LONG, "attention_factor": None}
    assert from_hf(d) == ("longrope", {"rope_factor": 32.0, "rope_original_max_position": 4096,
                                       "rope_short_factor": SHORT, "rope_long_factor": LONG})
    cfg = load_config([f"--rope_scaling={d}", "--n_embd=32", "--n_head=4"])
    assert cfg.rope_scaling == "longrope" and cfg.pos_settings["rope_long_factor"] == LONG


@pytest.mark.parametrize("arg, says", [
    ("--rope_short_factor=[1.0,2.0]", "rope_short_factor has 2 factors; this model rotates 4 pairs per head"),
    ("--rope_long_factor=[1.0,2.0,0.0,1.0]", "rope_long_factor must be a list of numbers > 0"),
    ("--rope_long_factor=2.0", "config key 'rope_long_factor' wants list"),
])
def test_bad_factor_lists_are_one_line(arg, says):
    with pytest.raises(ConfigError) as e:
        load_config(["--rope_scaling=longrope", "--n_embd=32", "--n_head=4", arg])
    assert says in str(e.value) and "\n" not in str(e.value)


LLAMA = dict(norm="rmsnorm", mlp="swiglu", n_kv_head=2, tie_embeddings=False)


@pytest.mark.parametrize("T", [ORIG, 4 * ORIG])
def test_import_from_transformers_llama_gives_its_logits(tmp_path, T):
    scaling = {"rope_type": "longrope", "factor": 4.0, "original_max_position_embeddings": ORIG,
               "short_factor": [1.0, 1.5, 2.0, 3.0], "long_factor": [1.0, 2.0, 4.0, 8.0]}
    hf_model = hf_llama(tmp_path / "hf", scaling)
    model = import_(tmp_path / "hf", tmp_path / "out")
    assert model.config.rope_scaling == "longrope" and model.pe.scaling.rope_original_max_position == ORIG
    x = torch.randint(0, 40, (2, T), generator=torch.Generator().manual_seed(1))
    assert logits_diff(hf_model, model, x) <= 1e-4


def test_export_runs_in_transformers_and_round_trips_bitwise(tmp_path):
    """Empty lists (1 per pair) are written as transformers needs them, one factor per pair."""
    model = posgpt_run(tmp_path / "run", **LLAMA, rope_scaling="longrope", rope_factor=4.0,
                       rope_long_factor=[1.0, 2.0, 4.0, 8.0])
    export.main([str(tmp_path / "run"), "--to=hf", f"--out={tmp_path / 'hf'}"])
    hf_model = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert hf_model.config.rope_parameters["short_factor"] == [1.0] * 4
    for T in (ORIG, 4 * ORIG):
        assert logits_diff(hf_model, model, torch.randint(0, 40, (2, T), generator=torch.Generator().manual_seed(T))) \
            <= 1e-4
    import_(tmp_path / "hf", tmp_path / "back")
    export.main([str(tmp_path / "back"), "--to=hf", f"--out={tmp_path / 'hf2'}"])
    assert files(tmp_path / "hf") == files(tmp_path / "hf2")


def test_a_generation_across_the_original_length_writes_nothing_on_the_encoding():
    from tests.test_encodings import held
    model = longrope_gpt(block_size=16)
    before = held(model.pe)
    model.generate(torch.randint(0, 40, (1, 5)), 30, top_k=5, generator=torch.Generator().manual_seed(0))
    plain, tensors = held(model.pe)
    assert plain == before[0] and all(torch.equal(tensors[n], t) for n, t in before[1].items())
