"""Each encoding owns its settings: the model config holds only the choice and the chosen
settings; a setting of another encoding is refused in one line; adding an encoding takes
its file and one registry line (the README's example, built, trained, saved and reloaded)."""
import dataclasses
import textwrap

import pytest
import torch

import positional
from training.config import ConfigError, load_config, model_config, upgrade_model_args
from model import GPT, GPTConfig


def test_model_config_has_no_field_of_one_encoding():
    fields = {f.name for f in dataclasses.fields(GPTConfig)}
    assert not fields & set(positional.setting_keys())
    assert {"pos_encoding", "rope_scaling", "pos_settings"} <= fields


def test_every_setting_has_one_type_and_a_default():
    for key, (kind, owners) in positional.setting_keys().items():
        assert isinstance(kind, type) and owners, key
    for cls in positional.REGISTRY.values():
        cls.Settings()      # every field has a default


@pytest.mark.parametrize("argv, message", [
    (["--pos_encoding=rope", "--t5_num_buckets=64"], "t5_num_buckets is a setting of t5; this run uses rope"),
    (["--pos_encoding=alibi", "--rope_base=5e5"], "rope_base is a setting of rope, xpos"),
    (["--pos_encoding=rope", "--rope_scaling=linear", "--rope_beta_fast=8"],
     "rope_beta_fast is a setting of rope_scaling ntk_by_parts/yarn; this run uses rope with rope_scaling=linear"),
    (["--pos_encoding=rope", "--rerope_leak=4"], "rerope_leak is a setting of rope_scaling leaky_rerope"),
    (["--pos_encoding=rope", "--rope_bse=5e5"], "unknown config key 'rope_bse'; did you mean 'rope_base'?"),
    (["--pos_encoding=t5", "--t5_num_buckets=2.5"], "config key 't5_num_buckets' wants an integer, got 2.5"),
])
def test_settings_of_another_encoding_are_one_line(argv, message):
    with pytest.raises(ConfigError) as e:
        load_config(argv)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_settings_are_gathered_with_defaults_and_saved_as_a_dict():
    cfg = load_config(["configs/xpos.py", "--rope_base=500000", "--rope_scaling=yarn", "--rope_factor=4"])
    assert cfg.pos_settings == dict(rope_base=500000.0, rotary_fraction=1.0, xpos_scale_base=512.0, rope_factor=4.0,
                                    rope_original_max_position=0, rope_beta_fast=32.0, rope_beta_slow=1.0,
                                    rope_ramp="index", rope_truncate=True, rope_attention_factor=0.0,
                                    rope_mscale=0.0, rope_mscale_all_dim=0.0)
    pe = GPT(GPTConfig(**cfg.model_args())).pe
    assert pe.base == 500000.0 and pe.kind == "yarn" and pe.scaling.rope_original_max_position == cfg.block_size


def test_changing_the_scaling_keeps_the_checkpoints_other_settings():
    args = load_config(["configs/rope.py", "--rope_base=500000"]).model_args()
    cfg = model_config(args, {"rope_scaling": "ntk", "rope_factor": 2.0})
    assert cfg.pos_settings["rope_base"] == 500000.0 and cfg.pos_settings["rope_factor"] == 2.0
    assert "rope_factor" not in model_config(cfg.__dict__, {"rope_scaling": ""}).pos_settings
    with pytest.raises(ConfigError, match="rope_factor is a setting of rope_scaling"):
        model_config(args, {"rope_factor": 2.0})
    assert "rope_factor" not in model_config(args, {"rope_factor": 2.0}, strict=False).pos_settings


def test_old_flat_checkpoint_args_are_upgraded():
    old = dict(block_size=64, vocab_size=65, n_layer=2, n_head=2, n_embd=32, dropout=0.0, bias=False,
               pos_encoding="rope", rope_base=10000.0, rotary_fraction=1.0, xpos_scale_base=512.0, t5_num_buckets=32,
               t5_max_distance=128, window=0, sinks=0, attention="softmax", rope_scaling="leaky_rerope",
               rope_factor=1.0, rope_original_max_position=0, rerope_window=0, rerope_leak=8.0)
    new = upgrade_model_args(old)
    assert new["pos_settings"] == dict(rope_base=10000.0, rotary_fraction=1.0, rerope_window=32, rerope_leak=8.0)
    pe = GPT(GPTConfig(**new)).pe
    assert (pe.name, pe.window, pe.leak, pe.needs_score_matrix, pe.length_dependent) == \
        ("leaky_rerope", 32, 8.0, True, False)


def test_a_flat_checkpoints_settings_carry_over_only_where_its_model_used_them():
    """An old flat checkpoint holds every setting of its day; evaluated with a RoPE method, the ones
    its own model used carry over (rope_base) and the method's take today's defaults, not the stored
    values its model never read (rope_factor, rope_beta_fast)."""
    old = dict(block_size=64, vocab_size=65, n_layer=2, n_head=2, n_embd=32, pos_encoding="rope", rope_base=5e5,
               rotary_fraction=1.0, rope_scaling="", rope_factor=3.0, rope_beta_fast=7.0, t5_num_buckets=8)
    got = model_config(old, {"rope_scaling": "yarn"}).pos_settings
    yarn = dataclasses.asdict(positional.rope_scaling.METHODS["yarn"][1]())
    assert got["rope_base"] == 5e5 and "t5_num_buckets" not in got
    assert (got["rope_factor"], got["rope_beta_fast"]) == (yarn["rope_factor"], yarn["rope_beta_fast"]) != (3.0, 7.0)
    assert model_config(old, {"rope_scaling": "yarn", "rope_factor": 4.0}).pos_settings["rope_factor"] == 4.0


def test_rerope_is_an_encoding_class_with_class_capabilities():
    from positional.rerope import ReRoPE
    from positional.rope import RoPE
    from positional.base import Ctx
    assert ReRoPE.needs_score_matrix and not ReRoPE.length_dependent
    x, pos = torch.randn(1, 2, 3, 8), torch.arange(5, 8)
    assert torch.equal(ReRoPE(8).rotate(x, Ctx(pos, pos), key=True), x)   # keys cached raw, rotated in its logits
    assert not RoPE.needs_score_matrix and "rerope" not in positional.rope_scaling.METHODS


README_EXAMPLE = '''
from dataclasses import dataclass

import torch
from torch import nn

from positional.base import PositionalEncoding, Settings


@dataclass
class CappedSettings(Settings):
    cap_distance: int = 64

    def check(self, cfg):
        if self.cap_distance < 1:
            raise ValueError(f"cap_distance must be >= 1, got {self.cap_distance}")


class Capped(PositionalEncoding):
    name, Settings = "capped", CappedSettings

    def __init__(self, n_head, cap):
        super().__init__()
        self.n_head, self.cap, self.w = n_head, cap, nn.Parameter(torch.zeros(n_head, cap + 1))

    @classmethod
    def from_config(cls, cfg, s):
        return cls(cfg.n_head, s.cap_distance)

    def score_bias(self, h, q, k):
        return self.w[h, (q - k).clamp(0, self.cap)]
'''


def test_readme_example_adds_an_encoding_with_one_registry_line(monkeypatch, tmp_path, tiny_data):
    """The README's 'Adding an encoding' code, verbatim in shape: registered by one line, it
    takes its setting from the command line, trains, checkpoints and reloads."""
    namespace = {}
    exec(compile(textwrap.dedent(README_EXAMPLE), "capped.py", "exec"), namespace)
    monkeypatch.setitem(positional.REGISTRY, "capped", namespace["Capped"])
    from training import config
    monkeypatch.setattr(config, "SETTINGS", positional.setting_keys())
    import train
    from tests.conftest import TINY_ARGS
    train.main([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--pos_encoding=capped",
                "--cap_distance=5", "--max_iters=10"])
    ckpt = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert ckpt["model_args"]["pos_settings"] == {"cap_distance": 5}
    model = GPT(model_config(ckpt["model_args"]))
    model.load_state_dict(ckpt["model"])
    assert model.pe.w.shape == (2, 6) and model.pe.w.abs().sum() > 0     # trained away from its zero init
    with pytest.raises(ConfigError, match="cap_distance must be >= 1"):
        load_config(["--pos_encoding=capped", "--cap_distance=0"])
