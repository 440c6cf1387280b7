"""Published behaviours, checked on a report's own evaluation: each claim of a paper about how an encoding or
a RoPE method behaves against length, as a paired difference of loss that the claim predicts the sign of.

A check compares (row a at length m_a L) with (row b at length m_b L): the per-seed difference of loss, paired
by seed and by evaluation chunk (every length scores the same targets), with stats.paired's bootstrap interval
over the chunks. Verdict: "agrees" when the interval is on the claimed side of zero, "contradicts" when it is on
the other side, "no result" when it holds zero, "not measured" when the report lacks either row, "not learned"
when either row starts from an encoding worse than the count 4-gram at L (it says nothing about length). The papers'
settings are far larger than a report's (models, data, L): the table says what was claimed where, and what
this report measures, never more.
"""
import math
from dataclasses import dataclass

from measure import stats


@dataclass
class Claim:
    source: str        # the paper, where in it, and its setting
    claim: str         # what it reports, in our words
    a: str             # row label, "{L}"-free: the loss of a ...
    at_a: float        # ... at at_a x L
    b: str             # minus the loss of b ...
    at_b: float        # ... at at_b x L
    sign: int          # the sign the claim predicts for loss(a) - loss(b): -1 (a better) or +1 (a worse)


PRESS = "Press et al. 2022 (ALiBi), fig. 1; WikiText-103, 247M parameters, L = 512"
PI = "Chen et al. 2023 (PI); LLaMA 7B-65B, L = 2048"
YARN = "Peng et al. 2024 (YaRN); Llama 2 7B/13B, L = 4096"
NTK = "bloc97 2023 (NTK-aware scaling, r/LocalLLaMA); LLaMA 7B, no fine-tune"
CLAIMS = [
    Claim(PRESS, "sinusoidal's perplexity rises as soon as the input passes L", "sinusoidal", 2, "sinusoidal", 1, +1),
    Claim(PRESS, "rotary's perplexity rises past L", "rope", 2, "rope", 1, +1),
    Claim(PRESS, "ALiBi's perplexity falls past L: it uses the longer input", "alibi", 2, "alibi", 1, -1),
    Claim(PRESS, "T5's bias extrapolates far better than rotary", "t5", 16, "rope", 16, -1),
    Claim(PRESS, "ALiBi extrapolates better than T5's bias", "alibi", 16, "t5", 16, -1),
    Claim("Haviv et al. 2022 (NoPE), table 1; WikiText-103 and the Pile, 125M-1.3B",
          "a causal LM without positions is somewhat worse at L than one with them", "none", 1, "alibi", 1, +1),
    Claim(PI + ", sec. 2.3 (interpolated scores bounded ~600x tighter)",
          "interpolated positions (PI, no fine-tune) are more stable at sL than extrapolated ones",
          "rope+linear", 4, "rope", 4, -1),
    Claim(PI + ", tables 1 and 4 (fine-tunes of up to 1,000 steps; direct: 10,000)",
          "fine-tuned with PI, a model is better at sL than one fine-tuned directly for as many steps",
          "rope+linear ft{N}", 4, "rope+direct ft{N}", 4, -1),
    Claim(PI + ", table 1 (1,000 steps at sL)", "fine-tuned with PI at sL, a model is better there than as pretrained",
          "rope+linear ft{N}", 4, "rope", 4, -1),
    Claim(NTK, "NTK-aware scaling lets RoPE read past L without fine-tuning", "rope+ntk", 4, "rope", 4, -1),
    Claim(NTK, "NTK-aware scaling is better than PI past L without fine-tuning", "rope+ntk", 4, "rope+linear", 4, -1),
    Claim(YARN + ", sec. 3.3", "dynamic scaling is RoPE itself up to L ...", "rope+dynamic", 1, "rope", 1, 0),
    Claim(YARN + ", sec. 3.3", "... and degrades gracefully past L, where RoPE breaks (no fine-tune)",
          "rope+dynamic", 16, "rope", 16, -1),
    Claim(YARN + ", sec. 4 (400 steps at sL)", "fine-tuned with YaRN at sL, a model is better there than as pretrained",
          "rope+yarn ft{N}", 4, "rope", 4, -1),
    Claim(YARN + ", sec. 4 (400 steps at sL against longer PI fine-tunes)",
          "fine-tuned as long or less, YaRN is better at sL than PI", "rope+yarn ft{N}", 4, "rope+linear ft{N}", 4, -1),
    Claim("Su 2023 (ReRoPE, blog); LLaMA, no fine-tune",
          "ReRoPE's perplexity does not rise past L", "rope+rerope", 16, "rope+rerope", 1, -1),
]


def cell(p):
    """A paired difference: mean ± sd, seeds with its sign, and the interval the verdict reads."""
    lo, hi = p.interval()
    sd = "" if math.isnan(p.sd) else f" ± {p.sd:.3f}"
    return f"{p.mean:+.3f}{sd}, {p.agree}/{p.n}, " + ("no interval" if math.isnan(lo) else f"[{lo:+.3f}, {hi:+.3f}]")


def learned(label, by, train_len, four_gram):
    """Whether the encoding a row starts from ("rope" for "rope+yarn ft600") beats the 4-gram at L (mean over seeds)."""
    base = by.get(label.split("+")[0].split(" ")[0], {}).get(train_len, {})
    return four_gram is None or bool(base) and sum(r["loss"] for r in base.values()) / len(base) < four_gram


def check(claim, by, train_len, budget, four_gram=None):
    """-> (label a, label b, stats.Paired or None, verdict) for one claim; by: {label: {length: {seed: row}}};
    four_gram: the 4-gram's loss at L (None: no baseline), a row worse than it is "not learned"."""
    a, b = (s.replace("{N}", str(budget)) for s in (claim.a, claim.b))
    la, lb = round(claim.at_a * train_len), round(claim.at_b * train_len)
    ra, rb = by.get(a, {}).get(la, {}), by.get(b, {}).get(lb, {})
    seeds = [s for s in ra if s in rb]
    if not seeds:
        return a, b, None, "not measured"
    if not (learned(a, by, train_len, four_gram) and learned(b, by, train_len, four_gram)):
        return a, b, None, "not learned"
    rows_a, rows_b = [ra[s] for s in seeds], [rb[s] for s in seeds]
    p = stats.paired_evals(rows_a, rows_b)
    if claim.sign == 0:   # an identity: equal to float precision in every seed
        return a, b, p, "agrees" if all(abs(x["loss"] - y["loss"]) < 1e-5 for x, y in zip(rows_a, rows_b)) \
            else "contradicts"
    if not p.is_result:      # the interval holds zero, or a seed disagrees in sign
        return a, b, p, "no result"
    return a, b, p, "agrees" if (p.mean > 0) == (claim.sign > 0) else "contradicts"


def lines(rows, train_len):
    """Markdown: the claims table from paired.read_eval's rows (the report's eval.csv and chunks)."""
    by, four_gram = {}, None
    for r in rows:
        if r.get("encoding") != "ngram" and not math.isnan(r["loss"]):
            by.setdefault(r["label"], {}).setdefault(r["length"], {})[str(r["seed"])] = r
        elif r["label"] == "4-gram" and r["length"] == train_len:
            four_gram = r["loss"]
    tails = {label.rsplit(" ft", 1)[1] for label in by if label.startswith("rope+") and " ft" in label}
    budget = max(tails, key=lambda t: int(t) if t.isdigit() else -1, default="N")   # the largest ("": unnumbered)
    out = ["| source and setting | claim | checked here: loss(a) - loss(b), nats | mean ± sd, seeds, 95% interval | "
           "verdict |",
           "|---|---|---|---|---|"]
    verdicts = []
    for c in CLAIMS:
        a, b, p, verdict = check(c, by, train_len, budget, four_gram)
        verdicts.append(verdict)
        what = f"{a} at {c.at_a:g}L - {b} at {c.at_b:g}L" + (" (predicted 0)" if c.sign == 0 else
                                                                f" (predicted {'<' if c.sign < 0 else '>'} 0)")
        out.append(f"| {c.source} | {c.claim} | {what} | {'—' if p is None else cell(p)} | {verdict} |")
    counts = {v: verdicts.count(v) for v in ("agrees", "contradicts", "no result", "not learned", "not measured")}
    out += ["", ", ".join(f"{n} {v}" for v, n in counts.items()) + f" (of {len(CLAIMS)} claims)."]
    return out


def section(rows, train_len):
    """Markdown: the report's section of published behaviours."""
    return ["## Published behaviours", "",
            "Each paper's claim about behaviour against length, checked on this report's own rows as a paired "
            "difference of loss (nats per token) between two rows or two lengths, paired by seed and by evaluation "
            "chunk, with a 95% bootstrap interval over the chunks (measure/published.py). Verdict: agrees or "
            "contradicts when the interval excludes zero and every seed agrees in sign, no result otherwise; not "
            "learned when a row starts from a model worse than the 4-gram at L. The papers' models, data and lengths "
            "are far larger: this says what this recipe shows, not whether the paper is right at its scale. ft{N}: "
            "the largest fine-tune budget.",
            "", *lines(rows, train_len), ""]
