"""Small multiples: values against length (or tokens) in one panel per group, each panel with a legend
under it that fits (at most MAX_ENTRIES lines, in distinct colours), ticks at the evaluated lengths, seed
bands, the training length and baselines marked. family() groups encodings by the hooks they implement,
so a new encoding lands in a panel unchanged. compare_report's figures are drawn with them.
"""
import math
import textwrap

import matplotlib
import matplotlib.ticker

import positional
from measure.encoding_plots import save

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

MAX_ENTRIES = 8   # lines per panel: what a two-column legend under a 4-inch panel holds
MAX_Y_TICKS = 10  # labelled ticks on a log y axis
COLORS = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]   # tab10 less its grey (the baselines')
FAMILIES = {"absolute": "none and absolute (added to the input)", "relative": "relative (score bias or own logits)",
            "rotary": "rotary (rotates q and k)", "other": "other (variants, unknown names)"}


def family(name):
    """The FAMILIES key of an encoding, from the hooks its class implements (rotate before a bias: a hybrid
    such as rope+alibi is rotary); a name outside positional.REGISTRY (a variant) is "other"."""
    if name not in positional.REGISTRY:
        return "other"
    cls = positional.REGISTRY[name]
    return "rotary" if cls.overrides("rotate") else "relative" if cls.needs_score_matrix else "absolute"


def fit_panels(groups, keep=None):
    """{title: entries} with every group of more than MAX_ENTRIES entries split into numbered parts of at
    most MAX_ENTRIES; keep: {title: n}, the first n entries (a reference) repeated in every part."""
    out = {}
    for title, entries in groups.items():
        k = (keep or {}).get(title, 0)
        rest = entries[k:]
        parts = max(1, math.ceil(len(rest) / (MAX_ENTRIES - k)))
        size = math.ceil(len(rest) / parts)
        for i in range(parts):
            out[title + (f" ({i + 1}/{parts})" if parts > 1 else "")] = entries[:k] + rest[i * size:(i + 1) * size]
    return out


def panel_grid(path, panels, draw, title, xlabel, ylabel, ncols=3):
    """One axes per panel of {panel title: entries} (at most MAX_ENTRIES each), ncols to a row; draw(ax,
    entries) plots a panel in distinct colours (ax's cycle); its legend goes under its axes. -> path."""
    if any(len(entries) > MAX_ENTRIES for entries in panels.values()):
        raise ValueError(f"a panel holds at most {MAX_ENTRIES} lines; split the groups with fit_panels")
    cols = min(ncols, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 1.2 + 3.6 * rows), squeeze=False, layout="constrained")
    for ax, (name, entries) in zip(axes.flat, panels.items()):
        ax.set_prop_cycle(color=COLORS)
        draw(ax, entries)
        ax.set_title(name, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=2, frameon=False)
    for ax in axes.flat[len(panels):]:
        ax.remove()
    fig.suptitle(textwrap.fill(title, int(7.5 * 4.4 * cols)))   # about 7.5 characters an inch: within the figure
    fig.supxlabel(xlabel, fontsize=10)
    fig.supylabel(ylabel, fontsize=10)
    return save(fig, path)


def draw_seeds(ax, xs, values, style="-", color=None, label=None):
    """The seeds' mean against xs, and their min-max band where there are several.
    values: [per x: the seeds' values, None where there is none]."""
    v = torch.tensor([[math.nan if x is None else x for x in at_x] for at_x in values], dtype=torch.float64)
    if torch.isnan(v).all():   # (xs, seeds)
        return
    line, = ax.plot(xs, v.nanmean(1).numpy(), style, marker="o", ms=3, lw=1.2, color=color, label=label)
    if v.shape[1] > 1:
        ax.fill_between(xs, v.min(1).values.numpy(), v.max(1).values.numpy(), color=line.get_color(), alpha=0.2)


def length_axis(ax, lengths):
    """Log-2 x with a tick at each evaluated length, labelled with the plain number, and no minor ticks."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def log_y(ax):
    """Log y labelled with plain numbers: the densest of 1-1.5-2-2.5-3-...-9, 1-1.5-2-3-5-7, 1-2-5 and 1 per decade
    that puts at most MAX_Y_TICKS in the range (so the low end of a panel over one or two decades is labelled too),
    about five even steps over less than a factor of 3."""
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ticker = matplotlib.ticker
    if hi / lo < 3:
        locator = ticker.MaxNLocator(5, steps=[1, 2, 2.5, 5, 10])
    else:
        for subs in ((1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9), (1, 1.5, 2, 3, 5, 7), (1, 2, 5), (1,)):
            locator = ticker.LogLocator(subs=subs, numticks=100)
            if sum(lo <= t <= hi for t in locator.tick_values(lo, hi)) <= MAX_Y_TICKS:
                break
    ax.yaxis.set_major_locator(locator)
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def small_multiples(path, panels, lengths, train_len=None, baselines=None, log=False, title="", xlabel="length",
                    ylabel=""):
    """Values against length, one panel per group. panels: {panel title: [(label, [per length: the seeds'
    values, None where there is none])]}, drawn by draw_seeds in distinct colours; train_len: a vertical
    line marked L; baselines: {name: [value per length or None]}, grey lines named at the right edge;
    log: log y. -> path."""
    def draw(ax, entries):
        for label, values in entries:
            draw_seeds(ax, lengths, values, label=label)
        for name, values in (baselines or {}).items():
            ax.plot(lengths, [math.nan if v is None else v for v in values], color="0.45", lw=0.9, ls=(0, (4, 2)))
            last = next((v for v in reversed(values) if v is not None), None)
            if last is not None:   # named in the right margin, clear of the lines
                ax.annotate(name, (1, last), xycoords=("axes fraction", "data"), xytext=(3, 0),
                            textcoords="offset points", va="center", fontsize=7, color="0.35")
        if train_len:
            ax.axvline(train_len, color="0.45", ls=":", lw=1)
            ax.text(train_len, 0.98, " L", transform=ax.get_xaxis_transform(), va="top", fontsize=8, color="0.35")
        length_axis(ax, lengths)
        if log:
            log_y(ax)
    return panel_grid(path, panels, draw, title, xlabel, ylabel)
