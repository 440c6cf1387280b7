"""Published behaviours: each claim a paired difference whose predicted sign the bootstrap interval decides."""
from measure import published
from measure.published import Claim, check


def row(label, seed, length, chunks):
    return dict(label=label, seed=seed, length=length, loss=sum(chunks) / len(chunks), chunk_loss=chunks,
                encoding=label.split("+")[0])


def table(rows):
    by = {}
    for r in rows:
        by.setdefault(r["label"], {}).setdefault(r["length"], {})[str(r["seed"])] = r
    return by


ROWS = [row("a", s, 8, [1.0, 1.2, 0.9, 1.1]) for s in (1, 2)] + \
       [row("a", s, 16, [0.8, 1.0, 0.7, 0.9]) for s in (1, 2)] + \
       [row("b", 1, 16, [0.9, 0.9, 0.8, 1.0]), row("b", 2, 16, [0.7, 1.1, 0.6, 1.0])] + \
       [row("a+m ft30", s, 16, [0.5, 0.6, 0.5, 0.6]) for s in (1, 2)]


def test_verdicts_by_the_sign_of_the_interval():
    by = table(ROWS)
    falls = check(Claim("", "", "a", 2, "a", 1, -1), by, 8, "")          # every chunk 0.2 lower at 16: agrees
    assert falls[3] == "agrees" and abs(falls[2].mean + 0.2) < 1e-9 and falls[2].agree == 2
    assert check(Claim("", "", "a", 2, "a", 1, +1), by, 8, "")[3] == "contradicts"
    assert check(Claim("", "", "a", 2, "b", 2, -1), by, 8, "")[3] == "no result"   # chunk differences of both signs
    assert check(Claim("", "", "c", 1, "a", 1, -1), by, 8, "")[3:] == ("not measured",)
    ft = check(Claim("", "", "a+m ft{N}", 2, "a", 2, -1), by, 8, "30")
    assert ft[:2] == ("a+m ft30", "a") and ft[3] == "agrees"
    assert check(Claim("", "", "a", 1, "a", 1, 0), by, 8, "")[3] == "agrees"      # an identity: equal losses
    assert check(Claim("", "", "a", 2, "a", 1, 0), by, 8, "")[3] == "contradicts"
    split = table(ROWS + [row("d", 1, 16, [0.5] * 4), row("d", 2, 16, [1.6] * 4)])   # d - a at 16: seed 1 below, 2 above
    p = check(Claim("", "", "d", 2, "a", 2, +1), split, 8, "")                         # mean +0.2, every chunk > 0
    assert p[2].lo > 0 and p[2].agree == 1 and p[3] == "no result"                    # but a seed says otherwise


def test_rows_from_a_model_worse_than_the_4gram_are_not_learned():
    by = table(ROWS)
    assert check(Claim("", "", "a", 2, "a", 1, -1), by, 8, "", four_gram=1.0)[3] == "not learned"   # a: 1.05 at L
    assert check(Claim("", "", "a", 2, "a", 1, -1), by, 8, "", four_gram=1.1)[3] == "agrees"
    ngram = dict(label="4-gram", seed="", length=8, loss=1.0, chunk_loss=[], encoding="ngram")
    text = "\n".join(published.lines(ROWS + [ngram], 8))
    assert f"0 agrees, 0 contradicts, 0 no result, 0 not learned, {len(published.CLAIMS)} not measured" in text
