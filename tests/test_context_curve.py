"""The in-range context curve (context_use.context_curve): every context scores the same targets,
each with exactly c tokens before it, checked against toy models whose loss is known by hand; and
compare.py's reference run trained past L, with the report section, end to end on tiny data."""
import csv
import math

import numpy as np
import pytest
import torch

import compare
from comparison import finetune
from measure import context_use
from measure.evaluation import validation_tokens
from training import checkpoint
from tests.conftest import TINY_ARGS, run_py, tiny_gpt

V = 10


class Counting(torch.nn.Module):
    """Predicts the next token of the stream 0, 1, ..., V - 1, 0, 1, ... as (last token + 1) mod V, with
    logit log(n) on it after n tokens of context (0 on the others): p = n / (n + V - 1), a loss that
    depends only on the context length."""
    def forward(self, idx):                                                   # (B, T) -> (B, T, V)
        seen = torch.arange(1, idx.shape[1] + 1, dtype=torch.float64)        # tokens of context at each position
        logits = torch.zeros(*idx.shape, V, dtype=torch.float64)
        return logits.scatter(2, ((idx + 1) % V)[..., None], seen.log()[None, :, None].expand(*idx.shape, 1)), None


class Unigram(torch.nn.Module):
    """The same logits whatever the context: the loss of a target is -log softmax(w)[token]."""
    def __init__(self, w):
        super().__init__()
        self.w = w

    def forward(self, idx):
        return self.w.expand(*idx.shape, V), None


def test_the_loss_is_that_of_exactly_c_tokens_of_context():
    tokens = np.arange(400) % V
    rows = context_use.context_curve(Counting(), tokens, [8, 16, 32], context_use.curve_targets(400, 50, 32))
    assert [r["context"] for r in rows] == [8, 16, 32] and all(r["tokens"] == 50 for r in rows)
    for r, want in zip(rows, (math.log(17 / 8), math.log(25 / 16), math.log(41 / 32))):   # log((c + V - 1) / c)
        assert r["loss"] == pytest.approx(want, rel=1e-6) and r["ppl"] == pytest.approx(math.exp(want), rel=1e-6)


def test_every_context_scores_the_same_targets():
    """A model blind to context has the same loss at every c, the mean over curve_targets' targets."""
    tokens = np.random.default_rng(0).integers(0, V, 3000)
    w = torch.randn(V, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    targets = context_use.curve_targets(len(tokens), 100, 64)
    rows = context_use.context_curve(Unigram(w), tokens, context_use.in_range_contexts(64), targets)
    want = -w.log_softmax(0)[tokens[targets]].mean().item()
    assert [r["context"] for r in rows] == [8, 16, 32, 64]
    assert [r["loss"] for r in rows] == pytest.approx([want] * 4, rel=1e-6)   # logits scored in float32


def test_targets_are_spread_after_the_longest_context():
    t = context_use.curve_targets(1000, 5, 200)
    assert t.tolist() == [200, 399, 599, 799, 999]
    assert context_use.curve_targets(10, 4, 6).tolist() == [6, 7, 8, 9]      # as many targets as there are tokens
    with pytest.raises(ValueError, match="needs 5 targets after the first 6 tokens, got 10 tokens"):
        context_use.curve_targets(10, 5, 6)
    assert context_use.in_range_contexts(256) == [8, 16, 32, 64, 128, 256]
    assert context_use.in_range_contexts(48) == [8, 16, 32, 48] and context_use.in_range_contexts(4) == [4]


def test_a_real_model_matches_windows_ending_at_the_target():
    model = tiny_gpt("rope", n_layer=2)
    tokens = torch.randint(0, 40, (300,), generator=torch.Generator().manual_seed(0)).numpy()
    targets = context_use.curve_targets(300, 3, 32)
    rows = context_use.context_curve(model, tokens, [8, 16, 32], targets)
    for r in rows:
        c = r["context"]
        with torch.no_grad():
            nll = [torch.nn.functional.cross_entropy(model(torch.as_tensor(tokens[t - c:t])[None])[0][0, -1],
                                                     torch.as_tensor(tokens[t])) for t in targets]
        assert r["loss"] == pytest.approx(torch.stack(nll).mean().item(), rel=1e-6)
    assert rows[0]["loss"] != pytest.approx(rows[2]["loss"], rel=1e-4)
    assert context_use.in_range_curve(model, tokens, 32, 3) == rows                 # targets after the 32 contexts
    assert context_use.in_range_curve(model, tokens, 16, 3, start=32) == rows[:2]   # after a longer one's


def test_panels_hold_at_most_per_panel_curves_and_keep_an_encoding_together():
    labels = ["none", "rope", "rope+ntk", "rope+yarn", "rope+yarn ft100", "alibi", "t5", "xpos", "xpos+yarn"]
    got = context_use.panels(labels)
    assert got == [["none", "rope", "rope+ntk", "rope+yarn", "rope+yarn ft100", "alibi"], ["t5", "xpos", "xpos+yarn"]]
    rope = ["rope", "rope+ntk", "rope+yarn", "rope+leaky_rerope"]
    tuned = ["rope+direct ft100", "rope+linear ft100", "rope+yarn ft100", "rope+longlora ft100"]
    assert context_use.panels(rope + tuned + ["xpos"]) == [rope, tuned + ["xpos"]]   # 8 of rope: the fine-tunes apart
    many = context_use.panels([f"rope+m{i}" for i in range(8)] + ["alibi"])
    assert [len(p) for p in many] == [6, 3] and all(len(p) <= context_use.PER_PANEL for p in got + many)


def test_the_reference_key():
    base = ["configs/compare.py", "--only=rope,alibi"]
    settings, _, cfg = compare.parse(base)
    assert settings["reference"] == "rope_4L" and settings["encodings"] == ["rope", "alibi", "rope_4L"]
    assert settings["variants"]["rope_4L"] == {"pos_encoding": "rope", "block_size": 1024,
                                               "batch_size": 4}   # batch_size 16 / 4
    assert not finetune.takes("rope_4L", "yarn", settings) and finetune.takes("rope", "yarn", settings)
    for off in ("--context_reference=", "--context_use=False"):
        settings = compare.parse([*base, off])[0]
        assert settings["reference"] == "" and "rope_4L" not in settings["encodings"]
    with pytest.raises(ValueError, match="context_reference: unknown encoding 'rop'"):
        compare.parse([*base, "--context_reference=rop"])


@pytest.mark.slow
def test_reference_and_in_range_section_end_to_end(tiny_data, tmp_path):
    """rope and alibi at L = 16 and rope trained at 2L as the reference: the same targets for every label, the
    reference measured as trained (no method, no fine-tune), its curve past L in the report."""
    tiny = [a for a in TINY_ARGS if not a.startswith(("--max_iters", "--eval_interval"))]
    out = tmp_path / "cmp"
    run_py("compare.py", *tiny, f"--data_dir={tiny_data}", f"--out_root={out}", "--only=rope,alibi", "--max_iters=6",
           "--eval_interval=6", "--eval_lengths=[16,32]", "--eval_tokens=64", "--plots=False", "--context_use=True",
           "--rope_scalings=['yarn']", "--context_tokens=64", "--context_targets=64", "--context_reference=rope",
           "--finetune_factor=2", env={"OMP_NUM_THREADS": "1"})
    ckpt = checkpoint.load(str(out / "rope_2L-s1337"))
    assert (ckpt["model_args"]["block_size"], ckpt["config"]["batch_size"], ckpt["iter_num"]) == (32, 4, 6)
    with open(out / "report" / "eval.csv") as f:
        assert list(dict.fromkeys(r["label"] for r in csv.DictReader(f)))[:4] == ["rope", "rope+yarn", "alibi",
                                                                                  "rope_2L"]
    with open(out / "report" / "context_curve.csv") as f:
        rows = list(csv.DictReader(f))
    got = {label: [(int(r["context"]), float(r["loss"])) for r in rows if r["label"] == label]
           for label in dict.fromkeys(r["label"] for r in rows)}
    assert {label: [c for c, _ in v] for label, v in got.items()} == {"rope": [8, 16], "alibi": [8, 16],
                                                                      "rope_2L": [8, 16, 32]}
    assert {r["tokens"] for r in rows} == {"64"}
    tokens, _ = validation_tokens(ckpt, str(tiny_data), "val")
    targets = context_use.curve_targets(len(tokens), 64, 32)      # after the longest training length, 32, for both
    for label in ("rope", "rope_2L"):
        model = checkpoint.build_model(checkpoint.load(str(out / f"{label}-s1337")), None, "cpu", strict=False)
        want = context_use.context_curve(model, tokens, [c for c, _ in got[label]], targets)
        assert [loss for _, loss in got[label]] == pytest.approx([w["loss"] for w in want], rel=1e-5)
    report = (out / "report" / "report.md").read_text()
    section = report.split("### In-range context curve: the positive control")[1]
    assert "rope_2L is trained with sequences of 2 L tokens, 2 times fewer of them per iteration" in section
    assert "![context_curve](context_curve.png)" in section
    line = next(s for s in section.splitlines() if s.startswith("| rope_2L |")).split(" | ")
    (l8, l16, l32), ref = [loss for _, loss in got["rope_2L"]], line[-1].rstrip(" |")
    assert line[1:4] == [f"{l8:.3f}", f"{l16:.3f}", f"{l32:.3f}"] and ref == f"{math.exp(l16 - l32):.3f}"
    alibi = next(s for s in section.splitlines() if s.startswith("| alibi |")).rstrip(" |").split(" | ")
    assert alibi[3] == "—" and alibi[-1] == "—"   # c = 32 is past its training length
    assert (out / "report" / "context_curve.png").read_bytes()[:4] == b"\x89PNG"
