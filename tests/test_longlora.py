"""LongLoRA (training/longlora.py): S²-Attn's group and shift pattern against masks written by hand
and against the paper's roll-and-reshape form, in every attention kernel; LoRA's merged weights
against the adapted forward; what trains; a fine-tune through train.py that resumes exactly and
saves a plain model evaluated with full attention; compare.py's "<enc>+longlora ft"; bad input."""
import csv
import shutil
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from attention.plan import AttentionPlan
from model import GPT
from positional.base import shifted_groups
from training import checkpoint, longlora
from tests.conftest import TINY_ARGS, run_py, tiny_gpt
from tests.inproc import on_training_forward, run_train, train_error

# T = 8, G = 4: heads 0, 1 in groups {0..3}, {4..7}; heads 2, 3 shifted by 2: {0, 1}, {2..5}, {6, 7}
PLAIN = ["10000000", "11000000", "11100000", "11110000", "00001000", "00001100", "00001110", "00001111"]
SHIFTED = ["10000000", "11000000", "00100000", "00110000", "00111000", "00111100", "00000010", "00000011"]


def as_mask(rows):
    return torch.tensor([[c == "1" for c in row] for row in rows])


def test_s2_attn_pattern_equals_a_mask_written_by_hand():
    pos = torch.arange(8)
    seen = AttentionPlan(pos, pos, causal=True, groups=shifted_groups(8, 4, 4)).visible()       # (H, T, T)
    assert torch.equal(seen, torch.stack([as_mask(PLAIN)] * 2 + [as_mask(SHIFTED)] * 2))
    three_heads = shifted_groups(8, 3, 4).tolist()
    assert three_heads == [[0, 0, 0, 0, 1, 1, 1, 1]] + [[0, 0, 1, 1, 1, 1, 2, 2]] * 2   # H // 2 plain
    doc = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1])           # with documents: both hide keys
    seen = AttentionPlan(pos, pos, causal=True, doc=doc, groups=shifted_groups(8, 4, 4)).visible()
    assert torch.equal(seen[2], as_mask(SHIFTED) & (doc[:, None] == doc[None, :]))


def paper_s2_attn(q, k, v, G):
    """The paper's Algorithm 1: roll half the heads' tokens by -G/2, causal attention inside
    each of T/G groups by a reshape, roll back. (B, H, T, D) -> (B, H, T, D)."""
    B, H, T, D = q.shape
    shifted = lambda x: torch.cat([x[:, :H // 2], x[:, H // 2:].roll(-G // 2, dims=2)], 1)  # noqa: E731
    grouped = [shifted(x).reshape(B, H, T // G, G, D) for x in (q, k, v)]
    y = F.scaled_dot_product_attention(*grouped, is_causal=True).reshape(B, H, T, D)
    return torch.cat([y[:, :H // 2], y[:, H // 2:].roll(G // 2, dims=2)], 1)


def test_s2_attn_equals_the_papers_roll_except_where_it_wraps_around():
    """Every output equals the paper's roll-and-reshape form but the first G/2 tokens of the
    shifted heads, which the roll puts after the last G/2 tokens in one group (they see the future)."""
    torch.manual_seed(0)
    B, H, T, D, G = 2, 4, 16, 8, 8
    q, k, v = (torch.randn(B, H, T, D) for _ in range(3))
    pos = torch.arange(T)
    mask = AttentionPlan(pos, pos, causal=True, groups=shifted_groups(T, H, G)).visible()
    ours = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    want = paper_s2_attn(q, k, v, G)
    torch.testing.assert_close(ours[:, :H // 2], want[:, :H // 2])
    torch.testing.assert_close(ours[:, H // 2:, G // 2:], want[:, H // 2:, G // 2:])
    assert not torch.allclose(ours[:, H // 2:, 1:G // 2], want[:, H // 2:, 1:G // 2])


def seen_tokens(model, T=8):
    """(T, T) bool: whether the logits at i change when token j does (one layer: the union of the heads' masks)."""
    idx = torch.randint(0, 40, (1, T), generator=torch.Generator().manual_seed(0))
    base = model(idx)[0]
    out = torch.zeros(T, T, dtype=torch.bool)
    for j in range(T):
        other = idx.clone()
        other[0, j] = (other[0, j] + 1) % 40
        out[:, j] = (model(other)[0] - base).abs().amax(-1)[0] > 1e-5
    return out


@pytest.mark.parametrize("pos", ["rope", "t5", "alibi", "cope"])   # SDPA, explicit (a learned bias), own logits
def test_s2_attn_in_training_full_attention_in_evaluation(pos):
    model = tiny_gpt(pos, n_layer=1, s2_group=4)
    assert torch.equal(seen_tokens(model), torch.ones(8, 8).tril().bool())            # eval: full causal attention
    assert torch.equal(seen_tokens(model.train()), as_mask(PLAIN) | as_mask(SHIFTED))  # training: S²-Attn
    plain = tiny_gpt(pos, n_layer=1)
    idx = torch.randint(0, 40, (2, 8))
    assert torch.equal(model.eval()(idx)[0], plain(idx)[0])          # s2_group changes nothing at evaluation


def lora_cfg(**kw):
    return SimpleNamespace(**{"lora_rank": 4, "lora_alpha": 8.0, "lora_targets": "qkv,proj,mlp", **kw})


def test_lora_merged_weights_give_the_adapted_forward():
    model, idx = tiny_gpt("rope"), torch.randint(0, 40, (2, 12))
    before = model(idx)[0]
    longlora.adapt(model, lora_cfg())
    torch.testing.assert_close(model(idx)[0], before, rtol=0, atol=0)   # B = 0: it starts as the model it adapts
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, longlora.LoRALinear):
                m.B.normal_(0, 0.5)
    adapted = model(idx)[0]
    assert (adapted - before).abs().max() > 1e-2
    plain = GPT(model.config).eval()
    plain.load_state_dict(longlora.checkpoint_state(model, lora_cfg())["model"])     # strict: a plain GPT's keys
    torch.testing.assert_close(plain(idx)[0], adapted, rtol=1e-5, atol=1e-5)
    lin = model.h[0].attn.c_attn
    torch.testing.assert_close(plain.h[0].attn.c_attn.weight, lin.base.weight + 2.0 * lin.B @ lin.A)   # alpha / r = 2


def test_only_adapters_embeddings_norms_and_the_encoding_train():
    model = tiny_gpt("t5")
    n = longlora.adapt(model, lora_cfg(lora_targets="qkv"))
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trained == {"wte.weight", "ln_f.weight", "pe.table.weight", *(f"h.{i}.{x}" for i in range(2) for x in (
        "ln_1.weight", "ln_2.weight", "attn.c_attn.A", "attn.c_attn.B"))}, trained
    table = model.pe.table.weight.numel()
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert n == trainable == 40 * 32 + 5 * 32 + table + 2 * (4 * 32 + 96 * 4)


@pytest.mark.slow
def test_longlora_fine_tune_resumes_exactly_and_saves_a_plain_model(tiny_data, tmp_path, monkeypatch):
    common = [*TINY_ARGS, f"--data_dir={tiny_data}", "--eval_interval=4"]
    assert run_train([*common, "--max_iters=4", f"--out_dir={tmp_path / 'pre'}"]) == 0
    ft = [*common, "--init_from=resume", "--block_size=32", "--batch_size=4", "--rope_scaling=linear",
          "--rope_factor=2", "--finetune_method=longlora", "--lr_decay_iters=12", "--max_iters=12"]
    for name in ("straight", "stopped"):
        shutil.copytree(tmp_path / "pre", tmp_path / name)
    losses = on_training_forward(monkeypatch)
    assert run_train([*ft, f"--out_dir={tmp_path / 'straight'}"]) == 0
    straight, losses[:] = list(losses), []
    assert run_train([*ft, f"--out_dir={tmp_path / 'stopped'}", "--max_iters=8"]) == 0
    assert run_train([*ft, f"--out_dir={tmp_path / 'stopped'}"]) == 0
    assert losses == straight and len(straight) == 8                  # the resumed fine-tune, loss for loss
    pre, a, b = (checkpoint.load(tmp_path / n) for n in ("pre", "straight", "stopped"))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["lora"]["settings"] == {"lora_rank": 8, "lora_alpha": 16.0, "lora_targets": "qkv,proj"}
    assert a["model_args"]["s2_group"] == 8                           # block_size / 4, the paper's group
    frozen = [k for k in pre["model"] if torch.equal(pre["model"][k], a["model"][k])]
    assert sorted(frozen) == ["h.0.mlp.c_fc.weight", "h.0.mlp.c_proj.weight"]
    model = checkpoint.build_model(a, None, "cpu")                    # a plain GPT: full attention at evaluation
    assert not any(isinstance(m, longlora.LoRALinear) for m in model.modules())
    idx = torch.randint(0, a["model_args"]["vocab_size"], (1, 32))
    other = idx.clone()
    other[0, 0] = (other[0, 0] + 1) % a["model_args"]["vocab_size"]
    last = lambda m, x: m(x)[0][0, -1]  # noqa: E731
    assert not torch.allclose(last(model, idx), last(model, other))   # the last token sees the first ...
    assert torch.equal(last(model.train(), idx), last(model, other))   # ... which S²-Attn (groups of 8) hides


@pytest.mark.slow
def test_compare_reports_the_longlora_fine_tune(tiny_data, tmp_path):
    tiny = [a for a in TINY_ARGS if not a.startswith(("--max_iters", "--eval_interval"))]
    out = tmp_path / "cmp"
    r = run_py("compare.py", *tiny, f"--data_dir={tiny_data}", f"--out_root={out}", "--only=rope", "--max_iters=4",
               "--eval_interval=4", "--eval_lengths=[16,32]", "--eval_tokens=64", "--plots=False", "--rope_scalings=[]",
               "--finetune_factor=2", "--finetune_iters=2", "--finetune_longlora=True", env={"OMP_NUM_THREADS": "1"})
    assert "ft2 longlora] fine-tuning at 32 to iter 6" in r.stdout
    ckpt = checkpoint.load(out / "rope-s1337-ft-longlora-2")
    assert (ckpt["config"]["finetune_method"], ckpt["model_args"]["rope_scaling"]) == ("longlora", "linear")
    with open(out / "report" / "eval.csv") as f:
        rows = list(csv.DictReader(f))
    labels = list(dict.fromkeys(row["label"] for row in rows))
    assert labels == ["rope", "rope+direct ft2", "rope+longlora ft2", "3-gram", "4-gram", "5-gram"]
    n = ckpt["lora"]["trained_params"]
    assert {row["trained_params"] for row in rows if row["label"] == "rope+longlora ft2"} == {str(n)}
    assert f"| longlora ({n:,} parameters trained) | — | " in (out / "report" / "report.md").read_text()


@pytest.mark.parametrize("args, words", [
    (["--finetune_method=lora"], "finetune_method must be '' or 'longlora'"),
    (["--finetune_method=longlora"], "add --init_from=resume"),
    (["--finetune_method=longlora", "--init_from=resume", "--lora_rank=0"], "lora_rank must be >= 1"),
    (["--finetune_method=longlora", "--init_from=resume", "--lora_targets=q,v"], "lora_targets must be a comma list"),
    (["--s2_group=5"], "s2_group must be 0 (off) or >= 2 and divide block_size=16"),
    (["--s2_group=8", "--attention=linear"], "S²-Attn) needs attention=softmax"),
])
def test_bad_longlora_settings_are_one_line_errors(args, words, tiny_data, tmp_path, capsys):
    assert words in train_error([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", *args], capsys)


def test_resuming_adapters_with_another_rank_is_refused(tiny_data, tmp_path, capsys):
    common = [*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--max_iters=2", "--eval_interval=2"]
    assert run_train(common) == 0
    assert run_train([*common, "--init_from=resume", "--finetune_method=longlora", "--max_iters=3"]) == 0
    err = train_error([*common, "--init_from=resume", "--finetune_method=longlora", "--max_iters=4", "--lora_rank=4"],
                      capsys)
    assert "LoRA adapters have lora_rank=8" in err
