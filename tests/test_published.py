"""Published behaviours: each claim a paired difference decided by its seed-level interval and Holm's correction,
only in its regime; identities of the code are tests here, not claims."""
import numpy as np
import pytest
import torch

from measure import published, stats
from measure.published import Claim, Retrieves, Rise, check
from tests.conftest import tiny_gpt


def row(label, seed, length, chunks):
    return dict(label=label, seed=seed, length=length, loss=sum(chunks) / len(chunks), chunk_loss=chunks,
                encoding=label.split("+")[0])


def table(rows):
    by = {}
    for r in rows:
        by.setdefault(r["label"], {}).setdefault(r["length"], {})[str(r["seed"])] = r
    return by


PATTERN = [0.1, -0.1, 0.05, -0.05]       # every row's chunks around its loss: chunk differences are seed differences


def rows_of(label, length, losses):
    """One row per seed 1, 2, 3 with the given mean losses."""
    return [row(label, s, length, [loss + d for d in PATTERN]) for s, loss in zip((1, 2, 3), losses)]


ROWS = [row("a", s, 8, [1.0, 1.2, 0.9, 1.1]) for s in (1, 2)] + \
       [row("a", s, 16, [0.8, 1.0, 0.7, 0.9]) for s in (1, 2)] + \
       [row("b", 1, 16, [0.9, 0.9, 0.8, 1.0]), row("b", 2, 16, [0.7, 1.1, 0.6, 1.0])] + \
       [row("a+m ft30", s, 16, [0.5, 0.6, 0.5, 0.6]) for s in (1, 2)]


def test_verdicts_by_the_side_of_the_null_over_seeds():
    by = table(ROWS)
    falls = check(Claim("", "", "a", 2, "a", 1, -1), by, 8, "")          # every chunk 0.2 lower at 16, both seeds
    assert falls[3] == "agrees" and falls[2].mean == pytest.approx(-0.2) and falls[2].how == "t over 2 seeds"
    assert check(Claim("", "", "a", 2, "a", 1, +1), by, 8, "")[3] == "contradicts"
    assert check(Claim("", "", "a", 2, "b", 2, -1), by, 8, "")[3] == "no result"   # seed means -0.05 and 0: p = 0.5
    assert check(Claim("", "", "c", 1, "a", 1, -1), by, 8, "")[3:] == ("not measured",)
    ft = check(Claim("", "", "a+m ft{N}", 2, "a", 2, -1), by, 8, "30")
    assert ft[:2] == ("a+m ft30", "a") and ft[3] == "agrees"
    # d - a at 16: seed 1 -0.35 in every chunk, seed 2 +0.75: the chunk bootstrap (seeds held fixed) excludes zero,
    # the t interval over the seeds and the bootstrap over seeds then chunks do not, so no result
    split = table(ROWS + [row("d", 1, 16, [0.5] * 4), row("d", 2, 16, [1.6] * 4)])
    p = check(Claim("", "", "d", 2, "a", 2, +1), split, 8, "")
    assert stats.bootstrap(p[2].values)[0] > 0 and p[2].boot[0] < 0 < p[2].boot[1]
    assert p[2].lo < 0 < p[2].hi and p[3] == "no result"


def test_rows_from_a_model_worse_than_the_4gram_are_not_learned():
    by = table(ROWS)
    assert check(Claim("", "", "a", 2, "a", 1, -1), by, 8, "", four_gram=1.0)[3] == "not learned"   # a: 1.05 at L
    assert check(Claim("", "", "a", 2, "a", 1, -1), by, 8, "", four_gram=1.1)[3] == "agrees"
    ngram = dict(label="4-gram", seed="", length=8, loss=1.0, chunk_loss=[], encoding="ngram")
    text = "\n".join(published.lines(ROWS + [ngram], 8))      # the call compare_report and test_docs make
    assert (f"0 agrees, 0 contradicts, 0 no result, 0 regime absent, 0 not learned, {len(published.CLAIMS)} not "
            f"measured (of {len(published.CLAIMS)} claims; Holm's correction over the 0 tested") in text


PI_NO_FT = next(c for c in published.CLAIMS if c.a == "rope+linear" and c.b == "rope")


def test_a_verdict_turns_regime_absent_when_its_precondition_is_removed():
    """PI's claim lives where extrapolated RoPE breaks: with RoPE's loss at 4L 2.5 nats above L (ppl x 12) it is
    tested; with the same difference between PI and RoPE but RoPE only 0.7 nats worse (x 2.0), regime absent."""
    base = rows_of("rope", 8, [1.0, 1.0, 1.0])
    broken = rows_of("rope", 32, [3.5, 3.5, 3.5]) + rows_of("rope+linear", 32, [3.0, 2.95, 3.05])
    a, b, m, verdict = check(PI_NO_FT, table(base + broken), 8, "")
    assert (a, b, verdict) == ("rope+linear", "rope", "agrees") and m.mean == pytest.approx(-0.5)
    mild = rows_of("rope", 32, [1.7, 1.7, 1.7]) + rows_of("rope+linear", 32, [1.2, 1.15, 1.25])
    *_, status, regime = published.measure(PI_NO_FT, table(base + mild), 8, "")
    assert status == "regime absent" and regime == "rope ppl 4L / L = 2.01 (regime: >= 10)"
    assert Rise("rope", 4, factor=2.0).measure(table(base + mild), 8, None)[0]        # a stated factor, met
    text = "\n".join(published.lines(base + mild, 8))
    assert "| rope ppl 4L / L = 2.01 (regime: >= 10) | — | — | regime absent |" in text
    assert check(PI_NO_FT, table(broken), 8, "")[3] == "not measured"                 # RoPE at L missing


def probe_rows(gain_in_range, gain_far, seed):
    """retrieval_probe.measure rows of one seed: 64 windows at d = 4 (in range) and 16 (2 L at L = 8)."""
    g = np.random.default_rng(seed)
    return [dict(distance=d, length=d + 7, in_range=d + 7 <= 8, control=np.full(64, 2.0),
                 probe=2.0 - gain - g.normal(0, 0.01, 64)) for d, gain in ((1, gain_in_range), (16, gain_far))]


USES = next(c for c in published.CLAIMS if c.kind == "probe" and c.a == "alibi")
CONTEXT = next(c for c in published.CLAIMS if c.kind == "context" and c.a == "alibi")


def test_uses_the_longer_input_is_the_probe_claim_and_needs_a_model_that_retrieves():
    rows = rows_of("alibi", 8, [1.0] * 3)
    retrieves = {"alibi": [probe_rows(0.5, 0.2, s) for s in range(3)]}
    assert check(USES, table(rows), 8, "", probes=retrieves)[3] == "agrees"
    assert check(USES, table(rows), 8, "", probes={"alibi": [probe_rows(0.5, 0.0, s) for s in range(3)]})[3] == \
        "no result"
    *_, status, regime = published.measure(USES, table(rows), 8, "", probes={"alibi": [probe_rows(0.0, 0.2, s)
                                                                                         for s in range(3)]})
    assert status == "regime absent" and regime.startswith("alibi in-range probe gain +0.00")
    assert check(USES, table(rows), 8, "")[3] == "not measured"                       # no probe: never perplexity
    assert Retrieves("alibi").measure({}, 8, None) == (None, "alibi's retrieval probe not measured")


def test_uses_the_longer_input_by_context_gain_reads_the_same_targets(tmp_path):
    """Context gain at fixed targets (compare.py's context_gain.csv): a gain of 1.000 is no result, not agreement."""
    rows = rows_of("alibi", 8, [1.0] * 3)
    flat = [dict(label="alibi", seed=s, context=c, loss=loss) for s in (1, 2, 3) for c, loss in ((8, 1.5), (16, 1.5))]
    assert check(CONTEXT, table(rows), 8, "", context=flat)[3] == "no result"
    helps = [dict(r, loss=r["loss"] - 0.1 - 0.01 * r["seed"]) if r["context"] == 16 else r for r in flat]
    a, b, m, verdict = check(CONTEXT, table(rows), 8, "", context=helps)
    assert verdict == "agrees" and m.mean == pytest.approx(0.12) and m.how == "t over 3 seeds"
    assert check(CONTEXT, table(rows), 8, "")[3] == "not measured"
    with open(tmp_path / "context_gain.csv", "w") as f:
        f.write("label,seed,context,tokens,loss,ppl,gain\n" + "".join(
            f"alibi,{r['seed']},{r['context']},64,{r['loss']},1,1\n" for r in helps))
    assert check(CONTEXT, table(rows), 8, "", context=published.read_context(tmp_path))[3] == "agrees"
    assert published.read_context(tmp_path / "nowhere") is None


RERUN = next(c for c in published.CLAIMS if c.a == "rope+rerope")


@pytest.mark.parametrize("rise, verdict", [((0.004, 0.005, 0.006), "agrees"),       # within 0.02 nats, surely
                                           ((0.036, 0.037, 0.038), "contradicts"),  # surely above the margin
                                           ((-0.005, 0.037, 0.02), "no result")])   # the sign flips (issue 49)
def test_does_not_rise_is_decided_against_an_equivalence_margin(rise, verdict):
    rows = rows_of("rope", 8, [1.0] * 3) + rows_of("rope+rerope", 8, [1.0] * 3) + \
        rows_of("rope+rerope", 128, [1.0 + r for r in rise])
    assert RERUN.margin == published.MARGIN == 0.02 and check(RERUN, table(rows), 8, "")[3] == verdict


def test_holm_corrects_across_the_claims_of_a_report():
    """NoPE's claim alone: seed differences 0.15, 0.2, 0.25, p = 0.020. Beside two tested claims with p near 1
    it is the smallest of three: x 3 = 0.061, no result."""
    rows = rows_of("alibi", 8, [1.0] * 3) + rows_of("none", 8, [1.15, 1.2, 1.25]) + \
        rows_of("sinusoidal", 8, [1.0] * 3) + rows_of("sinusoidal", 16, [1.01, 0.99, 1.0]) + \
        rows_of("rope", 8, [1.0] * 3) + rows_of("rope", 16, [1.0, 1.02, 0.98])
    nope = next(c for c in published.CLAIMS if c.a == "none")
    alone = check(nope, table(rows), 8, "")
    t = 0.2 / (0.05 / 3 ** 0.5)
    assert alone[2].p == pytest.approx(1 - t / (2 + t * t) ** 0.5) and alone[3] == "agrees"
    text = "\n".join(published.lines(rows, 8))
    line = next(x for x in text.splitlines() if "without positions" in x)
    assert line.endswith(f"| {3 * alone[2].p:.3g} | no result |")
    assert "Holm's correction over the 3 tested" in text


def test_identities_of_the_code_are_tests_not_claims():
    """Dynamic scaling is RoPE itself up to L (the YaRN paper's sec. 3.3 defines it so): equal logits, not a claim."""
    assert all(c.sign in (-1, 1) for c in published.CLAIMS)
    rope, dynamic = tiny_gpt("rope"), tiny_gpt("rope", rope_scaling="dynamic", rope_factor=4.0)
    idx = torch.randint(0, 40, (2, 32))
    assert torch.equal(rope(idx)[0], dynamic(idx)[0])                               # up to L = 32
    longer = torch.randint(0, 40, (1, 64))
    assert not torch.allclose(rope(longer)[0], dynamic(longer)[0])                  # past L it scales
