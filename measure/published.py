"""Published behaviours, checked on a report's own evaluation and only in the regime each claim lives in.

A claim is a paired difference whose sign (or bound) it predicts:
- loss claims: loss(a at at_a L) - loss(b at at_b L) per seed, every length scoring the same chunks;
- probe claims (kind "probe"): a's retrieval-probe gain at distance at_a L, minus b's at at_b L if b is given
  (measure/retrieval_probe.py), and context claims (kind "context"): a's loss at the same targets with context L
  minus with context at_a L (context_use.context_gain, compare.py's context_gain.csv): "uses the longer input" is
  tested by these, never by non-overlapping perplexity;
- "does not rise" claims carry an equivalence margin in nats: the claim is that the difference is below `margin`.
A claim states its regime as measured preconditions (`needs`): RoPE's perplexity past L has risen by a stated
factor (Rise), a model retrieves inside L (Retrieves). Where a precondition does not hold the verdict is "regime
absent", with the measurement beside it; identities of the code (dynamic scaling is RoPE up to L) are tests
(tests/test_published.py), not claims.

Interval and decision (measure/stats.py): with two or more seeds, Student's t over the seeds' differences is the
primary 95% interval and its two-sided test of the null (0, or the margin) gives p; with one seed, t over the chunks
(or probe windows), saying that the seeds' spread is not in it. The hierarchical bootstrap (seeds, then chunks) is
shown beside it. The p-values of a report's tested claims are adjusted together by Holm's method; a claim "agrees"
when its adjusted p is below ALPHA and the difference is on the claimed side of the null, "contradicts" when it is
below ALPHA on the other side, "no result" otherwise. "not measured": the report lacks a row or a precondition's
measurement; "not learned": a row starts from an encoding worse than the count 4-gram at L. The papers' settings are
far larger than a report's (models, data, L): the table says what was claimed where, and what this report measures.
"""
import csv
import math
import os
from dataclasses import dataclass

import numpy as np

from measure import retrieval_probe, stats

ALPHA = 0.05           # family-wise error rate over a report's tested claims (Holm)
BLOWUP = 10.0          # RoPE "breaks" past L: its perplexity there at least this many times its perplexity at L
MARGIN = 0.02          # nats per token: "does not rise" holds when the rise is significantly below this


@dataclass(frozen=True)
class Rise:
    """Precondition: label's perplexity at `at` x L is at least `factor` times that at L (from the seeds' mean loss)."""
    label: str
    at: float
    factor: float = BLOWUP

    def measure(self, by, train_len, probes):
        """(holds: True, False or None where not measured, what was measured)."""
        hi, lo = (by.get(self.label, {}).get(round(m * train_len), {}) for m in (self.at, 1))
        if not hi or not lo:
            return None, f"{self.label} at L and {self.at:g}L not measured"
        ratio = math.exp(np.mean([r["loss"] for r in hi.values()]) - np.mean([r["loss"] for r in lo.values()]))
        return ratio >= self.factor, f"{self.label} ppl {self.at:g}L / L = {ratio:.2f} (regime: >= {self.factor:g})"


@dataclass(frozen=True)
class Retrieves:
    """Precondition: label's retrieval probe is not void (its in-range gain's interval is above zero)."""
    label: str

    def measure(self, by, train_len, probes):
        runs = (probes or {}).get(self.label)
        if not runs:
            return None, f"{self.label}'s retrieval probe not measured"
        is_void, (mean, lo, hi) = retrieval_probe.void([rows for _, rows in retrieval_probe.seeds_of(runs)])
        return not is_void, (f"{self.label} in-range probe gain {mean:+.4f} [{lo:+.4f}, {hi:+.4f}] "
                             f"(regime: above 0)")


@dataclass
class Claim:
    source: str            # the paper, where in it the evidence is, and its setting
    claim: str             # what it reports, in our words
    a: str                 # row label, "{L}"-free: the loss (or probe gain) of a ...
    at_a: float            # ... at at_a x L (a probe claim: at distance at_a x L)
    b: str                 # minus that of b ("": nothing, a probe claim of a alone) ...
    at_b: float            # ... at at_b x L
    sign: int              # the side of the null the claim predicts: -1 below, +1 above
    margin: float = 0.0    # the null: 0, or an equivalence margin in nats ("does not rise": below margin)
    needs: tuple = ()      # preconditions (Rise, Retrieves): the regime the claim is made in
    kind: str = "loss"     # what is differenced: "loss", "probe" (the retrieval probe's gain) or "context" (gain)


PRESS = "Press et al. 2022 (ALiBi); WikiText-103, 247M parameters, L = 512"
PI = "Chen et al. 2023 (PI); LLaMA 7B-65B, L = 2048"
YARN = "Peng et al. 2024 (YaRN); Llama 2 7B/13B, L = 4096"
NTK = "bloc97 2023 (NTK-aware scaling, r/LocalLLaMA); LLaMA 7B, no fine-tune"
ROPE_BREAKS_4 = (Rise("rope", 4),)
ROPE_BREAKS_16 = (Rise("rope", 16),)
CLAIMS = [
    Claim(PRESS + ", fig. 1 (numbers: appendix tables 2 and 3)", "sinusoidal's perplexity rises as soon as the input "
          "passes L", "sinusoidal", 2, "sinusoidal", 1, +1),
    Claim(PRESS + ", fig. 1", "rotary's perplexity rises past L", "rope", 2, "rope", 1, +1),
    Claim(PRESS + ", fig. 1", "ALiBi's perplexity does not rise as the input grows past L", "alibi", 16, "alibi", 1,
          -1, margin=MARGIN),
    Claim(PRESS + ", sec. 4 and appendix B (sliding windows)", "ALiBi uses the input past L: a span 2L back still "
          "lowers the loss", "alibi", 2, "", 0, +1, needs=(Retrieves("alibi"),), kind="probe"),
    Claim(PRESS + ", sec. 4 and appendix B (sliding windows)", "ALiBi uses the input past L: the same targets have "
          "a lower loss with 2L of context than with L", "alibi", 2, "", 0, +1, kind="context"),
    Claim(PRESS + ", fig. 1", "T5's bias extrapolates far better than rotary", "t5", 16, "rope", 16, -1),
    Claim(PRESS + ", fig. 1", "ALiBi extrapolates better than T5's bias", "alibi", 16, "t5", 16, -1),
    Claim("Haviv et al. 2022 (NoPE), table 1; WikiText-103 and the Pile, 125M-1.3B",
          "a causal LM without positions is somewhat worse at L than one with them", "none", 1, "alibi", 1, +1),
    Claim(PI + ", sec. 3.2 (perplexity without fine-tuning, where extrapolation blows up)",
          "interpolated positions (PI, no fine-tune) are more stable at sL than extrapolated ones",
          "rope+linear", 4, "rope", 4, -1, needs=ROPE_BREAKS_4),
    Claim(PI + ", sec. 3 (passkey retrieval: effective context window; PI 1,000 steps against direct 10,000)",
          "fine-tuned with PI, a model reads further back at sL than one fine-tuned directly",
          "rope+linear ft{N}", 2, "rope+direct ft{N}", 2, +1, needs=(Retrieves("rope"),), kind="probe"),
    Claim(PI + ", sec. 3.2 (1,000 steps at sL)", "fine-tuned with PI at sL, a model is better there than as pretrained",
          "rope+linear ft{N}", 4, "rope", 4, -1, needs=ROPE_BREAKS_4),
    Claim(NTK, "NTK-aware scaling lets RoPE read past L without fine-tuning", "rope+ntk", 4, "rope", 4, -1,
          needs=ROPE_BREAKS_4),
    Claim(NTK, "NTK-aware scaling is better than PI past L without fine-tuning", "rope+ntk", 4, "rope+linear", 4, -1,
          needs=ROPE_BREAKS_4),
    Claim(YARN + ", sec. 3.3", "dynamic scaling degrades gracefully past L, where RoPE breaks (no fine-tune)",
          "rope+dynamic", 16, "rope", 16, -1, needs=ROPE_BREAKS_16),
    Claim(YARN + ", sec. 4 (400 steps at sL)", "fine-tuned with YaRN at sL, a model is better there than as pretrained",
          "rope+yarn ft{N}", 4, "rope", 4, -1, needs=ROPE_BREAKS_4),
    Claim(YARN + ", sec. 4 (400 steps at sL against longer PI fine-tunes)",
          "fine-tuned as long or less, YaRN is better at sL than PI", "rope+yarn ft{N}", 4, "rope+linear ft{N}", 4, -1),
    Claim("Su 2023 (ReRoPE, blog); LLaMA, no fine-tune", "ReRoPE's perplexity does not rise past L",
          "rope+rerope", 16, "rope+rerope", 1, -1, margin=MARGIN),
]


def learned(label, by, train_len, four_gram):
    """Whether the encoding a row starts from ("rope" for "rope+yarn ft600") beats the 4-gram at L (mean over seeds)."""
    base = by.get(label.split("+")[0].split(" ")[0], {}).get(train_len, {})
    return four_gram is None or bool(base) and sum(r["loss"] for r in base.values()) / len(base) < four_gram


def differences(claim, a, b, by, train_len, probes, context=None):
    """(seeds, units) paired differences of the claim, or None where the report lacks a row."""
    if claim.kind == "context":
        runs = {}
        for r in context or []:
            if r["label"] == a:
                runs.setdefault(str(r["seed"]), {})[int(r["context"])] = float(r["loss"])
        short, long = train_len, round(claim.at_a * train_len)
        diffs = [[c[short] - c[long]] for c in runs.values() if short in c and long in c]
        return np.array(diffs) if diffs and not np.isnan(diffs).any() else None
    if claim.kind == "probe":
        def gains(label, at):
            runs = dict(retrieval_probe.seeds_of((probes or {}).get(label, [])))
            d = round(at * train_len)
            return {s: next((retrieval_probe.gains(r) for r in rows if r["distance"] == d), None)
                    for s, rows in runs.items()}
        ga = gains(a, claim.at_a)
        gb = gains(b, claim.at_b) if b else {s: 0.0 for s in ga}
        seeds = [s for s in ga if ga[s] is not None and gb.get(s) is not None]
        diffs = [ga[s] - gb[s] for s in seeds]
        return np.stack(diffs) if diffs and not np.isnan(diffs).any() else None
    ra = by.get(a, {}).get(round(claim.at_a * train_len), {})
    rb = by.get(b, {}).get(round(claim.at_b * train_len), {})
    seeds = [s for s in ra if s in rb]
    if not seeds:
        return None
    return stats.eval_differences([ra[s] for s in seeds], [rb[s] for s in seeds])


def measure(claim, by, train_len, budget, four_gram=None, probes=None, context=None):
    """-> (label a, label b, stats.SeedLevel or None, status, regime): status "tested" or the verdict that stops
    before a test ("not measured", "not learned", "regime absent"); regime: the preconditions as measured."""
    a, b = (s.replace("{N}", str(budget)) for s in (claim.a, claim.b))
    values = differences(claim, a, b, by, train_len, probes, context)
    if values is None:
        return a, b, None, "not measured", ""
    if not all(learned(x, by, train_len, four_gram) for x in (a, b) if x):
        return a, b, None, "not learned", ""
    found = [need.measure(by, train_len, probes) for need in claim.needs]
    regime = "; ".join(text for _, text in found)
    if any(holds is None for holds, _ in found):
        return a, b, None, "not measured", regime
    if not all(holds for holds, _ in found):
        return a, b, None, "regime absent", regime
    return a, b, stats.seed_level(values, claim.margin), "tested", regime


def verdict(claim, m, p_adjusted):
    """agrees / contradicts / no result of a tested claim at its adjusted p."""
    if math.isnan(p_adjusted) or p_adjusted >= ALPHA:
        return "no result"
    return "agrees" if (m.mean > claim.margin) == (claim.sign > 0) else "contradicts"


def check(claim, by, train_len, budget, four_gram=None, probes=None, context=None):
    """-> (label a, label b, stats.SeedLevel or None, verdict) of one claim alone (a family of one: no correction)."""
    a, b, m, status, _ = measure(claim, by, train_len, budget, four_gram, probes, context)
    return a, b, m, verdict(claim, m, m.p) if status == "tested" else status


def cell(m):
    """The measured difference: mean, the primary interval and how it was made, the bootstrap's, the raw p."""
    if math.isnan(m.lo):
        return f"{m.mean:+.3f}, no interval ({m.how})"
    return (f"{m.mean:+.3f} [{m.lo:+.3f}, {m.hi:+.3f}] {m.how}; bootstrap, seeds then units "
            f"[{m.boot[0]:+.3f}, {m.boot[1]:+.3f}]; p = {m.p:.3g}")


def by_label(rows, train_len):
    """({label: {length: {seed: row}}}, the 4-gram's loss at L or None) of paired.read_eval's rows."""
    by, four_gram = {}, None
    for r in rows:
        if r.get("encoding") != "ngram" and not math.isnan(r["loss"]):
            by.setdefault(r["label"], {}).setdefault(r["length"], {})[str(r["seed"])] = r
        elif r["label"] == "4-gram" and r["length"] == train_len:
            four_gram = r["loss"]
    return by, four_gram


def lines(rows, train_len, probes=None, context=None):
    """Markdown: the claims table from paired.read_eval's rows (the report's eval.csv and chunks); for the
    probe claims, {label: [per seed: retrieval_probe.measure rows] or {seed: rows}}; for the context claims, the rows
    of context_gain.csv ({label, seed, context, loss}; read_context). None: those claims are not measured."""
    by, four_gram = by_label(rows, train_len)
    tails = {label.rsplit(" ft", 1)[1] for label in by if label.startswith("rope+") and " ft" in label}
    budget = max(tails, key=lambda t: int(t) if t.isdigit() else -1, default="N")   # the largest ("": unnumbered)
    found = [measure(c, by, train_len, budget, four_gram, probes, context) for c in CLAIMS]
    tested = [i for i, f in enumerate(found) if f[3] == "tested"]
    adjusted = dict(zip(tested, stats.holm([found[i][2].p for i in tested]))) if tested else {}
    out = ["| source and setting | claim | checked here (nats per token) | regime, as measured | difference, 95% "
           "interval | Holm p | verdict |",
           "|---|---|---|---|---|---|---|"]
    verdicts = []
    for i, (c, (a, b, m, status, regime)) in enumerate(zip(CLAIMS, found)):
        v = verdict(c, m, adjusted[i]) if status == "tested" else status
        verdicts.append(v)
        null = f"{c.margin:+g}" if c.margin else "0"
        side = f" (predicted {'<' if c.sign < 0 else '>'} {null})"
        what = {"probe": f"probe gain of {a} at d = {c.at_a:g}L" + (f" - of {b} at d = {c.at_b:g}L" if b else ""),
                "context": f"{a}: loss with context L - with context {c.at_a:g}L, the same targets",
                "loss": f"{a} at {c.at_a:g}L - {b} at {c.at_b:g}L"}[c.kind] + side
        p = f"{adjusted[i]:.3g}" if i in adjusted else "—"
        out.append(f"| {c.source} | {c.claim} | {what} | {regime or '—'} | {'—' if m is None else cell(m)} | {p} "
                   f"| {v} |")
    kinds = ("agrees", "contradicts", "no result", "regime absent", "not learned", "not measured")
    out += ["", ", ".join(f"{verdicts.count(k)} {k}" for k in kinds) + f" (of {len(CLAIMS)} claims; Holm's correction "
            f"over the {len(tested)} tested, family-wise error {ALPHA:g})."]
    return out


def section(rows, train_len, probes=None, context=None):
    """Markdown: the report's section of published behaviours."""
    return ["## Published behaviours", "",
            "Each paper's claim about behaviour against length, checked on this report's own rows only in the regime "
            "the claim is made in (measure/published.py). A claim is a paired difference of loss (nats per token) "
            "between two rows or two lengths, or, for claims that a model uses the longer input, of the retrieval "
            "probe's gain or of the loss of the same targets with a longer context; \"does not rise\" is a bound "
            f"of {MARGIN:g} nats. Its regime is measured (RoPE's perplexity past L at least {BLOWUP:g} times its "
            "perplexity at L; a model that retrieves inside L): "
            "where it does not hold the verdict is regime absent, with the measurement beside it. The interval is "
            "Student's t over seeds (with one seed, over chunks, the seeds' spread left out), with the hierarchical "
            "bootstrap over seeds then chunks beside it; p-values are adjusted across the tested claims by Holm's "
            f"method, and a verdict needs an adjusted p below {ALPHA:g}. Not learned: a row starts from a model "
            "worse than the 4-gram at L. The papers' models, data and lengths are far larger: this says what this "
            "recipe shows, not whether the paper is right at its scale. ft{N}: the largest fine-tune budget.",
            "", *lines(rows, train_len, probes, context), ""]


def read_context(report_dir):
    """The rows of a report's context_gain.csv (compare.py --context_use), or None where it has none."""
    path = os.path.join(report_dir, "context_gain.csv")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return list(csv.DictReader(f))
