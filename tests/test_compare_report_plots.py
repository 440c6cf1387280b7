"""The lm report's figures can be read: every figure compare_report.write draws, for the headline's 43
labels x 3 seeds (reports/compare/runs.csv) and the n-gram rows, has panels of at most MAX_ENTRIES
legend entries in distinct colours, legends inside the figure and clear of every axes, and ticks at
the evaluated lengths labelled with the lengths."""
import json
import math
import os
from types import SimpleNamespace

import matplotlib.figure
import pytest

import positional
from measure import compare_report, panels
from measure.panels import MAX_ENTRIES, family, fit_panels

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADLINE = os.path.join(ROOT, "reports", "compare", "runs.csv")


def test_family_from_hooks():
    """Each registry encoding lands in a family by the hooks it implements; a variant's name in "other"."""
    assert [family(n) for n in ("none", "learned", "alibi", "shaw", "rope", "xpos", "rope+alibi", "rope_qknorm")] == [
        "absolute", "absolute", "relative", "relative", "rotary", "rotary", "rotary", "other"]
    assert {family(n) for n in positional.REGISTRY} == {"absolute", "relative", "rotary"}


def test_fit_panels_splits_and_repeats_the_reference():
    entries = [("ref", [])] + [(f"m{i}", []) for i in range(9)]
    got = fit_panels({"a": entries, "b": entries[:3]}, keep={"a": 1})
    assert list(got) == ["a (1/2)", "a (2/2)", "b"]
    assert [e[0] for e in got["a (1/2)"]] == ["ref", "m0", "m1", "m2", "m3", "m4"]
    assert [e[0] for e in got["a (2/2)"]] == ["ref", "m5", "m6", "m7", "m8"]
    assert [e[0] for e in got["b"]] == ["ref", "m0", "m1"]
    with pytest.raises(ValueError, match="at most 8 lines"):
        panels.panel_grid("unused.png", {"a": entries}, lambda ax, e: None, "", "", "")


@pytest.mark.parametrize("lo,hi", [(2.3, 30), (3, 20), (2.2, 6.5), (1.05, 50), (3.1, 50), (4.2, 210), (1.6, 2.6)])
def test_log_y_labels_both_ends_of_a_panel(lo, hi):
    """Over up to two decades a labelled tick lies within a factor 1.7 of each end of the range (1-2-5 alone
    left 2.3-30 labelled 5, 10, 20: the low end, where the best models are, unlabelled), at most MAX_Y_TICKS."""
    fig = matplotlib.figure.Figure()
    ax = fig.add_subplot()
    ax.plot([1, 2], [lo, hi])
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    panels.log_y(ax)
    fig.draw_without_rendering()
    ticks = [t.get_position()[1] for t in ax.get_yticklabels() if t.get_text() and lo <= t.get_position()[1] <= hi]
    assert 3 <= len(ticks) <= panels.MAX_Y_TICKS, ticks
    assert min(ticks) <= 1.7 * lo and max(ticks) >= hi / 1.7, ticks
    assert all(t.get_text() == f"{t.get_position()[1]:g}" for t in ax.get_yticklabels() if t.get_text())


def overlap(a, b):
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def check_figure(fig, lengths):
    """The readability rules of one saved figure; -> its legend texts per axes."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_visible()]
    frames = [ax.get_window_extent(renderer) for ax in axes]
    if fig._suptitle is not None:   # a long title is wrapped, not cut at the figure's edges
        box = fig._suptitle.get_window_extent(renderer)
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, f"title wider than the figure: {fig._suptitle}"
    texts = []
    for ax in axes:
        legend = ax.get_legend()
        assert legend is not None, ax.get_title()
        handles = legend.legend_handles
        assert 0 < len(handles) <= MAX_ENTRIES, ax.get_title()
        colors = [tuple(h.get_color()) if not isinstance(h.get_color(), str) else h.get_color() for h in handles]
        assert len(set(colors)) == len(colors), f"{ax.get_title()}: two lines share a colour"
        box = legend.get_window_extent(renderer)
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, \
            f"{ax.get_title()}: legend outside the figure"
        assert not any(overlap(box, f) for f in frames), f"{ax.get_title()}: legend over an axes"
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            ticks = [t for t in labels if t.get_text()]
            assert len(ticks) >= 2, f"{ax.get_title()}: fewer than two labelled ticks"
            assert not any(overlap(a.get_window_extent(renderer), b.get_window_extent(renderer))
                           for a, b in zip(ticks, ticks[1:])), f"{ax.get_title()}: tick labels overlap"
        if ax.get_xscale() == "log":   # against length
            assert list(ax.get_xticks()) == lengths
            assert [t.get_text() for t in ax.get_xticklabels()] == [str(n) for n in lengths]
            assert not any(t.get_text() for t in ax.xaxis.get_minorticklabels())
            assert {t.get_text() for t in ax.texts} >= {"3-gram", "4-gram", "5-gram", " L"}
        texts.append([t.get_text() for t in legend.get_texts()])
    return texts


def headline_results(tmp_path):
    """compare.py's results for the headline's runs.csv: one result per (run, seed), its rows every label
    of that run, and a log.jsonl of a falling validation loss; plus the n-gram rows."""
    by_label, lengths = compare_report.read_runs(HEADLINE)
    results = {}
    for label, seeds in by_label.items():
        for s in seeds:
            r = results.setdefault((s["encoding"], s["seed"]), dict(encoding=s["encoding"], seed=int(s["seed"]),
                                                                    dir=str(tmp_path / f"{s['encoding']}-{s['seed']}"),
                                                                    rows=[], command="python train.py"))
            r["rows"] += [dict(label=label, length=n, ppl=p) for n, p in s["ppl"].items()]
    for i, r in enumerate(results.values()):
        os.makedirs(r["dir"])
        log = [dict(event="start", iter=0, params=1000, elapsed=0.0)] + [
            dict(event="eval", iter=it, tokens=2048 * it, train_loss=1.0, val_loss=2 + 2 / (1 + it / 50) + i / 100,
                 val_bpb=1.0, elapsed=float(it)) for it in range(0, 501, 100)]
        with open(os.path.join(r["dir"], "log.jsonl"), "w") as f:
            f.write("".join(json.dumps(row) + "\n" for row in log))
    baselines = [dict(label=f"{k}-gram", length=n, ppl=p * (1 + n / 1e5)) for k, p in ((3, 8.34), (4, 5.96), (5, 5.09))
                 for n in lengths]
    return list(results.values()), baselines, by_label, lengths


def write_checked(tmp_path, monkeypatch, results, baselines, lengths):
    """compare_report.write with every saved figure checked; -> {file name: legend texts per axes}."""
    saved, savefig = {}, matplotlib.figure.Figure.savefig

    def record(fig, path, **kw):
        savefig(fig, path, **kw)
        saved[os.path.basename(path)] = check_figure(fig, lengths)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    settings = dict(report_dir=str(tmp_path / "report"), eval_lengths=lengths, seed_list=[1337, 1338, 1339],
                    plots=False, eval_mode="nonoverlap", eval_tokens=8192, rope_factor=16.0, finetune_len=1024,
                    finetune_iters=[100], finetune_batch=2)
    cfg = SimpleNamespace(block_size=256, dataset="shakespeare_char", n_layer=4, n_head=4, n_embd=128, max_iters=500,
                          batch_size=8)
    compare_report.write(results, [], settings, cfg, "python compare.py configs/compare.py", baselines)
    return saved


@pytest.mark.slow
def test_one_panel_keeps_its_title_inside(tmp_path, monkeypatch):
    """NoPE and the absolute encodings alone (the CPU headline's first runs): one panel, its long title wrapped."""
    results, baselines, _, lengths = headline_results(tmp_path)
    results = [r for r in results if r["encoding"] in ("none", "learned", "sinusoidal")]
    saved = write_checked(tmp_path, monkeypatch, results, baselines, lengths)
    assert len(saved["ppl_vs_length.png"]) == 1


@pytest.mark.slow
def test_every_report_figure_fits(tmp_path, monkeypatch):
    results, baselines, by_label, lengths = headline_results(tmp_path)
    saved = write_checked(tmp_path, monkeypatch, results, baselines, lengths)
    assert sorted(saved) == ["ppl_vs_length.png", "val_loss.png"]
    # every label is drawn once, in its family's panel or under its method's name (and budget: "yarn ft") beside
    # "<enc> alone"
    drawn = [t for panel in saved["ppl_vs_length.png"] for t in panel if not t.endswith(" alone")]
    runs = [label for label, seeds in by_label.items()]
    assert len(drawn) == len(runs) == 43
    assert {label if seeds[0]["main"] else label[len(seeds[0]["encoding"]) + 1:]
            for label, seeds in by_label.items()} == set(drawn)
    assert sorted(t for panel in saved["val_loss.png"] for t in panel) == sorted({r["encoding"] for r in results})


@pytest.mark.slow
def test_redraw_from_runs_csv(tmp_path):
    """A report's ppl_vs_length.png is drawn again from its runs.csv alone."""
    (tmp_path / "runs.csv").write_text(open(HEADLINE).read())
    path = compare_report.redraw(str(tmp_path), 256)
    assert open(path, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    by_label, lengths = compare_report.read_runs(HEADLINE)
    assert lengths == [256, 512, 1024, 2048, 4096] and len(by_label["rope+yarn ft"]) == 3
    assert by_label["rope"][0]["main"] and not by_label["rope+yarn"][0]["main"]
    assert math.isclose(by_label["none"][0]["ppl"][256], 11.744583299140992)
