"""The paired differences of an lm report (measure/paired.py, written by compare_report): the comparisons it
makes, their numbers against a hand example, the result / not-a-result wording, and a report without per-chunk
losses (written before them)."""
import csv
import math
from types import SimpleNamespace

import pytest

from measure import compare_report, paired


def run_rows(label, encoding, seed, losses, chunks=None):
    """Evaluation rows of one run and label at lengths 16 and 32 (NaN: no positions there); chunks(label,
    loss): the row's chunk losses (None: rows without them)."""
    return [dict(label=label, encoding=encoding, method="base", mode="nonoverlap", length=n, tokens=64, loss=loss,
                 ppl=math.exp(loss), chunk_loss=[] if chunks is None or math.isnan(loss) else chunks(label, loss))
            for n, loss in zip((16, 32), losses)]


def write_report(tmp_path, runs, chunks):
    """compare_report.write of runs {(label, encoding): [per seed: (loss@16, loss@32)]}
    -> {(label, ref, length): row}."""
    results = []
    for seed in (1, 2, 3):
        (tmp_path / f"s{seed}").mkdir(exist_ok=True)
        rows = [r for (label, enc), losses in runs.items()
                for r in run_rows(label, enc, seed, losses[seed - 1], chunks)]
        results.append(dict(encoding="rope", seed=seed, dir=str(tmp_path / f"s{seed}"), rows=rows, command="python"))
    settings = dict(report_dir=str(tmp_path / "report"), eval_lengths=[16, 32], seed_list=[1, 2, 3], plots=False,
                    eval_mode="nonoverlap", eval_tokens=64, rope_factor=2.0, finetune_len=0)
    cfg = SimpleNamespace(block_size=16, dataset="tiny", n_layer=1, n_head=2, n_embd=32, max_iters=10, batch_size=1)
    md = open(compare_report.write(results, [], settings, cfg, "python compare.py")).read()
    with open(tmp_path / "report" / "paired.csv") as f:
        return md, {(r["label"], r["reference"], int(r["length"])): r for r in csv.DictReader(f)}


RUNS = {("rope", "rope"): [(2.0, 2.5), (2.0, 2.5), (2.0, 2.5)],
        ("alibi", "alibi"): [(1.9, 2.5), (1.8, 2.5), (1.95, 2.5)],          # 16: -0.1, -0.2, -0.05 against rope
        ("learned", "learned"): [(2.1, math.nan), (1.9, math.nan), (2.03, math.nan)],
        ("rope+yarn", "rope"): [(2.0, 2.4), (2.0, 2.35), (2.0, 2.3)],
        ("rope+alibi", "rope+alibi"): [(2.0, 2.5)] * 3}                      # an encoding whose name holds a "+"


def test_comparisons_pair_encodings_with_rope_and_methods_with_their_encoding():
    labels = ["rope", "alibi", "rope+yarn", "rope+yarn ft", "rope+alibi", "rope+alibi+ntk", "rope_qk", "3-gram"]
    assert paired.comparisons(labels[:-1]) == [
        ("alibi", "rope"), ("rope+alibi", "rope"), ("rope_qk", "rope"),
        ("rope+yarn", "rope"), ("rope+yarn ft", "rope"), ("rope+alibi+ntk", "rope+alibi")]
    assert paired.comparisons(["alibi", "alibi+x"]) == [("alibi+x", "alibi")]   # no rope: methods only


T2 = 4.303   # t(0.975, 2) to 3 decimals: three seeds (intervals compared to 1e-4)


@pytest.mark.slow
def test_paired_differences_by_hand(tmp_path):
    """The primary interval is Student's t over the seeds' differences, whatever the chunks: alibi's chunks all
    differ from rope's by the seed's difference, so the chunk bootstrap (seeds held fixed) is that mean alone, while
    the seeds' spread puts t's interval across 0: not a result. learned's chunks 1 nat either side move only the
    chunk bootstrap. rope+yarn at 32 has a t interval below 0 (p 0.035) that Benjamini-Hochberg across the table's 7
    cells does not keep (q = 7 p, its p the smallest)."""
    md, paired = write_report(tmp_path, RUNS, lambda label, loss: [loss, loss])
    p = paired["alibi", "rope", 16]
    diffs = [-0.1, -0.2, -0.05]
    sd = math.sqrt(sum((d - sum(diffs) / 3) ** 2 for d in diffs) / 2)
    assert float(p["mean"]) == pytest.approx(-0.35 / 3) and float(p["sd"]) == pytest.approx(sd)
    assert (p["seeds"], p["agree"], p["interval"], p["result"]) == ("3", "3", "t over 3 seeds", "False")
    half = T2 * sd / math.sqrt(3)
    assert (float(p["lo"]), float(p["hi"])) == pytest.approx((-0.35 / 3 - half, -0.35 / 3 + half), abs=1e-4)
    assert (float(p["chunk_lo"]), float(p["chunk_hi"])) == pytest.approx((-0.35 / 3, -0.35 / 3))
    assert paired["alibi", "rope", 32]["result"] == "False" and float(paired["alibi", "rope", 32]["p"]) == 1
    assert ("learned", "rope", 32) not in paired and ("rope+alibi", "rope", 16) in paired
    yarn = paired["rope+yarn", "rope", 32]
    assert float(yarn["mean"]) == pytest.approx(-0.15) and float(yarn["hi"]) < 0
    assert float(yarn["p"]) == pytest.approx(0.0351, abs=1e-4)
    assert float(yarn["q"]) == pytest.approx(7 * float(yarn["p"]))
    assert yarn["result"] == "False"
    assert "| alibi | rope | -0.117 ± 0.076, 3/3, [-0.306, +0.073], q 0.41, not a result |" in md
    assert "0 of 7 differences are results (t over seeds, BH across cells" in md

    # learned's two chunks 1 nat above and below each seed's loss: only the chunk bootstrap spans 0 by a nat
    md, paired = write_report(tmp_path, RUNS, lambda label, loss: [loss + 1, loss - 1] if label == "learned" else
                              [loss, loss])
    p = paired["learned", "rope", 16]
    assert float(p["mean"]) == pytest.approx(0.01) and p["agree"] == "2"
    assert float(p["chunk_lo"]) == pytest.approx(0.01 - 1) and float(p["chunk_hi"]) == pytest.approx(0.01 + 1)
    half = T2 * float(p["sd"]) / math.sqrt(3)
    assert (float(p["lo"]), float(p["hi"])) == pytest.approx((0.01 - half, 0.01 + half), abs=1e-4)
    assert p["result"] == "False"
    assert "| learned | rope | +0.010 ± 0.101, 2/3, [-0.242, +0.262], q 1, not a result | — |" in md


@pytest.mark.slow
def test_a_difference_every_seed_and_cell_shows_is_a_result(tmp_path):
    """rope+yarn 0.5 nats better at 32 with seed differences -0.49, -0.5, -0.51: p ~ 4e-5 (t over seeds), kept by
    Benjamini-Hochberg across the 7 cells, in bold."""
    runs = {**RUNS, ("rope+yarn", "rope"): [(2.0, 2.01), (2.0, 2.0), (2.0, 1.99)]}
    md, paired = write_report(tmp_path, runs, lambda label, loss: [loss, loss])
    p = paired["rope+yarn", "rope", 32]
    assert float(p["q"]) < 0.05 and p["result"] == "True"
    assert "**-0.500 ± 0.010, 3/3, [-0.525, -0.475], q " in md and "1 of 7 differences are results" in md


@pytest.mark.slow
def test_a_report_without_chunk_losses_uses_the_seeds(tmp_path):
    """Rows without chunk_loss (a report written before them): the same t interval over seeds, no chunk bootstrap."""
    md, paired = write_report(tmp_path, RUNS, None)
    with open(tmp_path / "report" / "eval_chunks.csv") as f:
        assert list(csv.reader(f)) == [["label"]]
    p = paired["rope+yarn", "rope", 32]                                        # -0.1, -0.15, -0.2
    assert p["interval"] == "t over 3 seeds" and float(p["sd"]) == pytest.approx(0.05)
    half = T2 * 0.05 / 3 ** 0.5                                                # t(0.975, 2) sd / sqrt(3)
    assert (float(p["lo"]), float(p["hi"])) == pytest.approx((-0.15 - half, -0.15 + half), abs=1e-4)
    assert p["chunk_lo"] == "nan" and p["result"] == "False"                  # q = 7 p = 0.25
    assert paired["alibi", "rope", 16]["result"] == "False"                   # -0.117 + 4.303 x 0.076 / sqrt(3) > 0
    assert "BH across cells" in md and "## Paired differences" in md
