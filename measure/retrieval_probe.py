"""Retrieval probe: does the model use a span of text it saw d tokens back? (issue 49, item 1)

Perplexity past the training length L cannot say whether far tokens are used (context_use.py's docstring); this
asks it of one piece of information at a known distance, on the corpus's own text:

probe window    validation text (the filler), with a span X of S other validation tokens written at `first`
                and again at `first + d`: each token of the second copy is the token d positions before it.
control window  the same filler and the same second copy, with the first copy's slot holding another span Y
                of S validation tokens: the same positions, the same length, only the repeated information gone.
score           the mean loss of the second copy's tokens after its first (the first cannot be predicted from
                the copy: nothing before it says that a copy begins), per window:
                    gain(d) = loss(control) - loss(probe)            nats per token
                    fraction(d) = gain(d) / loss(control)
                Above 0: the model took something from d tokens back.

Windows end at the second copy's last token: window length = S (the filler before the first copy, so that it is
not at position 0) + d + S - 1 inputs. A window that fits in L is "in range". The windows depend only on the tokens,
d, S, the count and the seed, never on the model: every checkpoint, seed and encoding scores the same ones, so
differences are paired. In range the probe is the positive control: a model that learned its corpus gains there;
where the in-range gain's 95% interval does not exclude zero, or its mean is below CLEAR (0.1 nats a token; a model
that copies a span gains a nat or more there), the probe is reported void (nothing past L can be read from a model
that does not retrieve inside it).

Reach: with a window of attention w on n layers, the output at position q depends on inputs q - n (w - 1) .. q
only, so when n (w - 1) < d - S + 1 no scored prediction can see any token of the first copy, and the probe's and
the control's losses are exactly equal (tests/test_retrieval_probe.py proves the probe can fail).

Intervals (measure/stats.py): with several seeds, Student's t over the seeds' mean gains (primary) and the
hierarchical bootstrap over seeds then windows; with one seed, Student's t over the windows. The fraction's
interval is the gain's divided by the mean control loss (the control's own spread left out).
"""
import csv
import math
import os
from dataclasses import dataclass

import numpy as np

from measure import stats
from measure.evaluation import window_losses

SPAN = 32                                  # tokens in each span (S)
SPANS = 128                                # windows per distance
DISTANCES = (0.25, 0.5, 1, 2, 4, 8, 16)    # default distances d, in units of the training length L
TRIES = 100                                # draws of a span before giving up on a window
CLEAR = 0.1                                # nats a token: an in-range gain below it is no clear retrieval (void)


@dataclass(frozen=True)
class Windows:
    """The probe and control windows of one distance: (n, length + 1) token ids each, inputs [:-1], targets [1:]."""
    distance: int
    span: int
    first: int              # where the first copy starts in every window
    probe: np.ndarray
    control: np.ndarray

    @property
    def length(self):
        """Model inputs per window."""
        return self.probe.shape[1] - 1

    @property
    def scored(self):
        """Loss indices of the second copy's tokens after its first (index j predicts token j + 1)."""
        second = self.first + self.distance
        return slice(second, second + self.span - 1)


def distances(train_len, multiples=DISTANCES, span=SPAN):
    """Distances in tokens for multiples of L, at least the span (the copies do not overlap), without repeats."""
    return sorted({max(span, round(m * train_len)) for m in multiples})


def make_windows(tokens, distance, spans=SPANS, span=SPAN, seed=0):
    """Windows of one distance drawn from `tokens` (the validation split) with a generator seeded by (seed,
    distance): the filler a contiguous run, X and Y spans from elsewhere in the split, Y's tokens not X's."""
    if distance < span:
        raise ValueError(f"retrieval probe distance {distance} is shorter than the span {span}: the copies would "
                         f"overlap; use distances >= {span} or a shorter span")
    size = span + distance + span          # filler, first copy and gap, second copy
    n = len(tokens)
    if n < size + 2 * span:
        raise ValueError(f"the retrieval probe at distance {distance} needs windows of {size} tokens and two more "
                         f"spans of {span}, {size + 2 * span} tokens; the validation split has {n}: use shorter "
                         f"distances or more validation text")
    rng = np.random.default_rng([seed, distance])
    first = span
    probe, control = [], []
    for _ in range(spans):
        g = int(rng.integers(0, n - size + 1))
        x, y = draw_pair(tokens, rng, span, (g, g + size))
        filler = np.asarray(tokens[g:g + size], dtype=np.int64)
        p, c = filler.copy(), filler.copy()
        p[first:first + span] = x
        c[first:first + span] = y
        p[first + distance:] = x
        c[first + distance:] = x
        probe.append(p)
        control.append(c)
    return Windows(distance, span, first, np.stack(probe), np.stack(control))


def draw_pair(tokens, rng, span, taken):
    """Two spans of `span` tokens outside the range `taken` and apart from each other, with different tokens."""
    lo, hi = taken
    for _ in range(TRIES):
        a, b = (int(v) for v in rng.integers(0, len(tokens) - span + 1, size=2))
        apart = abs(a - b) >= span and all(s + span <= lo or s >= hi for s in (a, b))
        x, y = np.asarray(tokens[a:a + span], np.int64), np.asarray(tokens[b:b + span], np.int64)
        if apart and not np.array_equal(x, y):
            return x, y
    raise ValueError(f"no two distinct spans of {span} tokens outside the filler in {TRIES} draws: the validation "
                     f"split is too short or too repetitive for the retrieval probe")


def score(model, windows, device="cpu"):
    """(probe, control): (n,) float64 mean loss of each window's second copy; nan where the model has no
    positions for the window's length. The caller sets autocast."""
    n = len(windows.probe)
    if model.max_positions is not None and windows.length > model.max_positions:
        return np.full(n, math.nan), np.full(n, math.nan)
    flat = np.concatenate([windows.probe, windows.control]).reshape(-1)     # (2 n (length + 1),)
    starts = [k * (windows.length + 1) for k in range(2 * n)]
    nll = window_losses(model, flat, starts, windows.length, device)[:, windows.scored].mean(1).numpy()   # (2 n,)
    return nll[:n], nll[n:]


def measure(model, tokens, train_len, dists=None, spans=SPANS, span=SPAN, seed=0, device="cpu"):
    """Rows {"distance", "length", "in_range", "probe", "control"} (the last two (n,) arrays), one per distance
    (default: distances(train_len)), on windows that depend on the tokens and settings alone."""
    rows = []
    for d in dists or distances(train_len, span=span):
        w = make_windows(tokens, d, spans, span, seed)
        probe, control = score(model, w, device)
        rows.append(dict(distance=d, length=w.length, in_range=w.length <= train_len, probe=probe, control=control))
    return rows


# ---- summaries over seeds ---------------------------------------------------------------------
def gains(row):
    """(n,) per-window gain of a measure() row, loss(control) - loss(probe); its arrays may be lists (JSON)."""
    return np.asarray(row["control"], dtype=float) - np.asarray(row["probe"], dtype=float)


def gain_interval(gains):
    """(mean, lo, hi, how) of per-window gains (seeds, windows): t over seeds with several, t over windows with one."""
    gains = np.atleast_2d(gains)
    if len(gains) > 1:
        return (*stats.t_interval(gains.mean(1)), f"t over {len(gains)} seeds")
    return (*stats.t_interval(gains[0]), f"t over {gains.shape[1]} windows")


def summarize(runs, train_len, rounds=2000):
    """runs: [per seed: measure() rows], the same windows -> one dict per distance: the losses, the gain in
    nats per token and as a fraction of the control's loss with their 95% intervals, the hierarchical bootstrap's
    interval (seeds, then windows), and whether the window is in range."""
    out = []
    for i, row in enumerate(runs[0]):
        probe = np.stack([r[i]["probe"] for r in runs])       # (seeds, windows)
        control = np.stack([r[i]["control"] for r in runs])
        base = dict(distance=row["distance"], length=row["length"], in_range=row["in_range"], seeds=len(runs),
                    windows=probe.shape[1])
        if np.isnan(probe).any():
            out.append(dict(base, probe=math.nan, control=math.nan, gain=math.nan, lo=math.nan, hi=math.nan,
                            fraction=math.nan, frac_lo=math.nan, frac_hi=math.nan, boot_lo=math.nan,
                            boot_hi=math.nan, interval=""))
            continue
        mean, lo, hi, how = gain_interval(control - probe)
        ctrl = float(control.mean())
        boot = stats.hierarchical_bootstrap(control - probe, rounds)
        out.append(dict(base, probe=float(probe.mean()), control=ctrl, gain=mean, lo=lo, hi=hi, fraction=mean / ctrl,
                        frac_lo=lo / ctrl, frac_hi=hi / ctrl, boot_lo=boot[0], boot_hi=boot[1], interval=how))
    return out


def void(runs):
    """(void, (mean, lo, hi) of the in-range gain): the per-window gains of every distance whose window fits in
    L, pooled; void when there is none, when its 95% interval does not exclude zero on the positive side, or when
    it is not clear (below CLEAR nats a token: a model that copies gains about a nat or more)."""
    pooled = [np.concatenate([gains(r) for r in rows if r["in_range"]] or [np.array([])])
              for rows in runs]
    if not pooled[0].size or np.isnan(pooled).any():
        return True, (math.nan, math.nan, math.nan)
    mean, lo, hi, _ = gain_interval(np.stack(pooled))
    return not (lo > 0 and mean >= CLEAR), (mean, lo, hi)


def table_lines(runs_by_label, train_len):
    """Markdown: per label and distance the losses, the gain and its fraction with intervals; a void line per label.
    runs_by_label: {label: [per seed: measure() rows] or {seed: rows}}."""
    head = ("| run | d | d / L | window | loss, second copy | loss, control | gain, nats/token [95%] | "
            "gain / control [95%] | bootstrap, seeds then windows |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for label, runs in runs_by_label.items():
        runs = [rows for _, rows in seeds_of(runs)]
        for s in summarize(runs, train_len):
            if math.isnan(s["gain"]):
                lines.append(f"| {label} | {s['distance']} | {s['distance'] / train_len:g} | {s['length']} | "
                             f"n/a | n/a | n/a | n/a | n/a |")
                continue
            lines.append(f"| {label} | {s['distance']} | {s['distance'] / train_len:g} | {s['length']} | "
                         f"{s['probe']:.3f} | {s['control']:.3f} | {s['gain']:+.4f} [{s['lo']:+.4f}, {s['hi']:+.4f}]"
                         f" | {s['fraction']:+.2%} [{s['frac_lo']:+.2%}, {s['frac_hi']:+.2%}] | "
                         f"[{s['boot_lo']:+.4f}, {s['boot_hi']:+.4f}] |")
        is_void, (mean, lo, hi) = void(runs)
        measured = (f"in-range gain {mean:+.4f} [{lo:+.4f}, {hi:+.4f}] nats/token: " if not math.isnan(mean) else
                    "in-range windows not scored: " if any(r["in_range"] for r in runs[0]) else "no window fits in L: ")
        verdicts.append(f"- {label}: " + measured
                        + ("**void** (the model does not retrieve inside L, so nothing past L can be read)"
                           if is_void else "retrieves inside L"))
    return lines + ["", *verdicts]


def plot(path, runs_by_label, train_len):
    """Small multiples of the gain against distance (log-2 x), one panel per encoding (context_use.panels: its
    methods together, its fine-tunes apart): per label the mean gain and its 95% interval as a band; zero dashed, L
    dotted. runs_by_label as write's."""
    import matplotlib.pyplot as plt
    from measure.context_use import panels
    from measure.encoding_plots import save
    summaries = {label: summarize([rows for _, rows in seeds_of(runs)], train_len) for label, runs in
                 runs_by_label.items()}
    groups = panels(list(summaries))
    cols = min(2, len(groups))
    rows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.6 * cols, 3.3 * rows), sharey=True, squeeze=False)
    for ax, group in zip(axes.flat, groups):
        for label in group:
            ok = [s for s in summaries[label] if not math.isnan(s["gain"])]
            xs = [s["distance"] for s in ok]
            line, = ax.plot(xs, [s["gain"] for s in ok], marker="o", ms=3, lw=1.2, label=label)
            ax.fill_between(xs, [s["lo"] for s in ok], [s["hi"] for s in ok], color=line.get_color(), alpha=0.2)
        ax.axhline(0, color="grey", ls="--", lw=1)
        ax.axvline(train_len, color="grey", ls=":", lw=1)
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_xlabel("distance d between the copies (tokens)", fontsize=8)
    for ax in axes.flat[len(groups):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("gain, nats/token")
    fig.suptitle(f"Retrieval probe: loss(control) - loss(second copy), 95% interval (dotted: L = {train_len})",
                 fontsize=10)
    return save(fig, path)


def seeds_of(runs):
    """[(seed, rows)] of a label's runs: a list of measure() rows per seed (seeds 0, 1, ...) or {seed: rows}."""
    return list(runs.items()) if isinstance(runs, dict) else list(enumerate(runs))


def read(report_dir):
    """{label: {seed: measure() rows}} back from write's two CSVs in report_dir ({} without them): what the docs'
    tables summarise without the checkpoints."""
    try:
        rows = list(csv.DictReader(open(os.path.join(report_dir, "retrieval_probe.csv"))))
        arms = list(csv.DictReader(open(os.path.join(report_dir, "retrieval_probe_windows.csv"))))
    except OSError:
        return {}
    losses = {(a["run"], a["seed"], a["distance"], a["arm"]): [float(v) for v in a["losses"].split()] for a in arms}
    out = {}
    for r in rows:
        key = r["run"], r["seed"], r["distance"]
        out.setdefault(r["run"], {}).setdefault(int(r["seed"]), []).append(dict(
            distance=int(r["distance"]), length=int(r["length"]), in_range=r["in_range"] == "True",
            probe=losses[(*key, "probe")], control=losses[(*key, "control")]))
    return out


def write(runs_by_label, report_dir, train_len):
    """retrieval_probe.csv (one row per label, seed and distance: mean losses), retrieval_probe_windows.csv (each
    window's loss, the unit of the intervals), retrieval_probe.md and .png (plot) into report_dir; -> their paths.
    runs_by_label: {label: [per seed: measure() rows] or {seed: rows}}."""
    os.makedirs(report_dir, exist_ok=True)
    paths = {k: os.path.join(report_dir, f"retrieval_probe{k}") for k in (".csv", "_windows.csv", ".md", ".png")}
    with open(paths[".csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "seed", "distance", "length", "in_range", "windows", "probe", "control", "gain"])
        w.writerows([label, seed, r["distance"], r["length"], r["in_range"], len(r["probe"]),
                     f"{np.mean(r['probe']):.6f}", f"{np.mean(r['control']):.6f}", f"{gains(r).mean():.6f}"]
                    for label, runs in runs_by_label.items() for seed, rows in seeds_of(runs) for r in rows)
    with open(paths["_windows.csv"], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "seed", "distance", "arm", "losses"])
        w.writerows([label, seed, r["distance"], arm, " ".join(f"{v:.5f}" for v in r[arm])]
                    for label, runs in runs_by_label.items() for seed, rows in seeds_of(runs) for r in rows
                    for arm in ("probe", "control"))
    with open(paths[".md"], "w") as f:
        f.write("\n".join(["## Retrieval probe: loss of a span's second copy, d tokens after the first", "",
                           *table_lines(runs_by_label, train_len), "", "![retrieval probe](retrieval_probe.png)",
                           ""]))
    plot(paths[".png"], runs_by_label, train_len)
    return paths
