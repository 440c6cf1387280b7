"""DroPE (training/drope.py): train.py --init_from=resume --drop_positions=True makes a RoPE checkpoint a NoPE model
with the same weights (and with --qk_norm=True, gains of 1 added); the recalibration goes on from its own
checkpoints exactly, and what it writes loads, evaluates and samples as NoPE; compare.py's "<enc>+drope ftN";
bad input in one line."""
import csv
import shutil

import pytest
import torch

import compare
import sample
import train
from comparison import finetune
from measure import evaluation
from model import GPT
from training import checkpoint
from training.config import ConfigError, load_config, model_config
from tests.conftest import TINY_ARGS, run_py
from tests.inproc import copy_run, on_training_forward, run_train, train_error


def switched(run_dir, tiny_data, *more):
    """(the checkpoint, the model train.py builds from it with --drop_positions=True)."""
    cfg = load_config([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={run_dir}", "--init_from=resume",
                       "--drop_positions=True", *more])
    ckpt, _, model = train.load_run(cfg)
    return ckpt, model.eval()


@pytest.mark.parametrize("qk_norm", [False, True])
def test_the_switched_model_is_a_fresh_nope_model_with_the_same_weights(tiny_run, tiny_data, tmp_path, qk_norm):
    run = copy_run(tiny_run, tmp_path / "run")
    ckpt, model = switched(run, tiny_data, f"--qk_norm={qk_norm}")
    assert ckpt["model_args"]["pos_encoding"] == "rope" and model.pe.name == "none"
    fresh = GPT(model_config(dict(ckpt["model_args"], pos_encoding="none", pos_settings={}, qk_norm=qk_norm))).eval()
    state = {k: v for k, v in ckpt["model"].items() if not k.startswith("pe.")}
    missing = fresh.load_state_dict(state, strict=False).missing_keys
    assert sorted(missing) == ([f"h.0.attn.{n}_norm.weight" for n in "kq"] if qk_norm else [])   # new gains of 1
    rope = checkpoint.build_model(ckpt, None, "cpu").eval()
    idx = torch.randint(0, ckpt["model_args"]["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[0], fresh(idx)[0], rtol=0, atol=0)
        assert not torch.allclose(model(idx)[0], rope(idx)[0], atol=1e-4)   # the rotation is gone


def test_a_recalibration_goes_on_exactly_and_writes_a_nope_model(tiny_run, tiny_data, tmp_path, monkeypatch, capsys):
    """From a RoPE checkpoint: 6 steps at once, or 3 then 3 more (the second start finds a NoPE checkpoint written
    by the switch and goes on with its optimizer), loss for loss; the result evaluates and samples as NoPE."""
    common = [*TINY_ARGS, f"--data_dir={tiny_data}", "--init_from=resume", "--drop_positions=True",
              "--eval_interval=3", "--decay_lr=False"]
    for name in ("straight", "stopped"):
        copy_run(tiny_run, tmp_path / name)
    losses = on_training_forward(monkeypatch)
    assert run_train([*common, f"--out_dir={tmp_path / 'straight'}", "--max_iters=16"]) == 0
    straight, losses[:] = list(losses), []
    assert run_train([*common, f"--out_dir={tmp_path / 'stopped'}", "--max_iters=13"]) == 0
    assert run_train([*common, f"--out_dir={tmp_path / 'stopped'}", "--max_iters=16"]) == 0
    assert losses == straight and len(straight) == 6
    ckpt = checkpoint.load(tmp_path / "stopped")
    assert (ckpt["model_args"]["pos_encoding"], ckpt["config"]["drop_positions"]) == ("none", True)
    assert not [k for k in ckpt["model"] if k.startswith("pe.")]
    model = checkpoint.build_model(ckpt, None, "cpu")
    assert model.pe.name == "none"
    rows = evaluation.evaluate_checkpoint(str(tmp_path / "stopped"), [16, 32], tokens_per_point=64, device="cpu",
                                          data_dir=str(tiny_data))
    assert [r["length"] for r in rows] == [16, 32] and all(r["loss"] < 5 for r in rows)
    capsys.readouterr()
    sample.main([f"--out_dir={tmp_path / 'stopped'}", "--max_new_tokens=8", "--num_samples=1", "--device=cpu"])
    assert "[8 tokens in" in capsys.readouterr().err
    other = train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path / 'stopped'}",
                         "--init_from=resume", "--max_iters=20"], capsys)   # a NoPE model now: no rope to resume
    assert "has pos_encoding=none, config asks for rope" in other


@pytest.mark.parametrize("pos, says", [
    ("alibi", "drop_positions=True removes a rotary encoding (DroPE), and the checkpoint in"),
    ("none", "has pos_encoding=none: it has no positions to drop; resume it without --drop_positions"),
])
def test_a_checkpoint_without_a_rotation_is_refused(pos, says, tiny_data, tmp_path, capsys):
    common = [*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", f"--pos_encoding={pos}"]
    assert run_train([*common, "--max_iters=2", "--eval_interval=2"]) == 0
    assert says in train_error([*common, "--init_from=resume", "--drop_positions=True", "--max_iters=4"], capsys)


def test_another_encoding_than_the_checkpoints_is_refused(tiny_run, tiny_data, tmp_path):
    with pytest.raises(ConfigError, match="has pos_encoding=rope, config asks for xpos; use the checkpoint's value"):
        switched(copy_run(tiny_run, tmp_path / "run"), tiny_data, "--pos_encoding=xpos")


@pytest.mark.parametrize("args, says", [
    ([], "drop_positions=True recalibrates a trained model without positions (DroPE): add --init_from=resume"),
    (["--init_from=resume", "--rope_scaling=yarn"], "removes the rotation that rope_scaling=yarn rescales"),
    (["--init_from=resume", "--layer_encodings=rope,none"], "drops the one encoding of every layer"),
    (["--init_from=resume", "--finetune_method=longlora"], "are two fine-tunes; use one"),
])
def test_bad_drop_positions_settings_are_one_line_errors(args, says):
    with pytest.raises(ConfigError) as e:
        load_config([*TINY_ARGS, "--n_layer=2", "--drop_positions=True", *args])
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_compare_runs_drope_where_finetune_methods_names_it():
    """Named beside frequency methods it joins them; alone it runs with direct only (not []'s every method); only
    rotary runs take it; its train.py arguments: the switch, at L with batch_size sequences (as many tokens as
    the others' at s L)."""
    settings, _, cfg = compare.parse(["configs/compare_cpu.py"])
    assert "drope" not in finetune.finetune_methods("rope", settings)   # the CPU headline's default: off
    named = compare.parse(["configs/compare_cpu.py", "--finetune_methods=['yarn','drope']"])[0]
    assert finetune.finetune_methods("rope", named) == ["direct", "yarn", "drope"]
    alone = compare.parse(["configs/compare_cpu.py", "--finetune_methods=['drope']"])[0]
    every = compare.parse(["configs/compare_cpu.py", "--finetune_methods=[]"])[0]
    assert finetune.finetune_methods("rope", alone) == ["direct", "drope"]
    every_one = finetune.finetune_methods("rope", every)
    assert {"linear", "ntk", "yarn"} <= set(every_one) and "drope" not in every_one
    assert finetune.finetune_methods("alibi", alone) == []
    assert finetune.finetune_args("drope", alone, cfg) == [f"--block_size={cfg.block_size}",
                                                         f"--batch_size={cfg.batch_size}", "--decay_lr=False",
                                                         f"--learning_rate={cfg.min_lr!r}", "--drop_positions=True"]
    with pytest.raises(ConfigError, match="finetune_methods: longlora not a frequency method; use some of linear"):
        compare.parse(["configs/compare_cpu.py", "--finetune_methods=['longlora']"])


@pytest.mark.slow
def test_compare_reports_the_drope_fine_tune(tiny_data, tmp_path):
    tiny = [a for a in TINY_ARGS if not a.startswith(("--max_iters", "--eval_interval"))]
    out = tmp_path / "cmp"
    r = run_py("compare.py", *tiny, f"--data_dir={tiny_data}", f"--out_root={out}", "--only=rope,alibi",
               "--max_iters=4", "--eval_interval=4", "--eval_lengths=[16,32]", "--eval_tokens=64", "--plots=False",
               "--rope_scalings=[]", "--finetune_factor=2", "--finetune_iters=[2,3]", "--finetune_methods=['drope']",
               env={"OMP_NUM_THREADS": "1"})
    assert "ft2 drope] fine-tuning at 16 to iter 6" in r.stdout       # at L, where the others fine-tune at 2 L
    ckpt = checkpoint.load(out / "rope-s1337-ft-drope-3")
    assert (ckpt["model_args"]["pos_encoding"], ckpt["model_args"]["block_size"], ckpt["iter_num"]) == ("none", 16, 7)
    with open(out / "report" / "eval.csv") as f:
        labels = list(dict.fromkeys(row["label"] for row in csv.DictReader(f)))
    assert labels[:6] == ["rope", "rope+direct ft2", "rope+direct ft3", "rope+drope ft2", "rope+drope ft3", "alibi"]
    assert "| drope (positions dropped, recalibrated at 16) | — | " in (out / "report" / "report.md").read_text()
