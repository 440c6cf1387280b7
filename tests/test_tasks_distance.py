"""Retrieval by key-query distance (tasks/score.py by_distance): the recorded distance is the real one, examples
cover the bins they are asked for, and stub models that copy from their input score what their reach allows."""
import shutil

import pytest
import torch

import tasks
from tasks.common import PAD, QRY, SEP, answer_runs, draw_distance, rng
from tasks.score import DISTANCE_BINS, by_distance, distance_edges, examples

RETRIEVAL = ["passkey", "mqar"]
L = 32                                     # L / 4 = 8 > 4, passkey's shortest distance: every bin reachable


class Copier(torch.nn.Module):
    """Reads its answer from the tokens it was fed: the token copy_distances(prefix)[-1] back, when that distance
    is below `reach` (it attends to its last `reach` tokens), else PAD. reach=None: it reads everything."""
    max_positions = None

    def __init__(self, task, reach=None):
        super().__init__()
        self.task, self.reach, self.w = task, reach, torch.nn.Parameter(torch.zeros(1))

    def setup_cache(self, batch, max_len):
        self.fed = [[] for _ in range(batch)]

    def clear_cache(self):
        self.fed = None

    def forward(self, idx, **kw):
        logits = torch.zeros(*idx.shape, self.task.VOCAB_SIZE)
        for b, row in enumerate(idx.tolist()):
            self.fed[b] += row
            d = self.task.copy_distances(self.fed[b])[-1]
            seen = self.reach is None or d < self.reach
            logits[b, -1, self.fed[b][-1 - d] if seen else PAD] = 1.0
        return logits, None


def true_distances(name, ids):
    """By hand, per answer: how far back the value to copy lies from the token that predicts it."""
    if name == "passkey":
        key, q = ids.index(SEP) + 1, ids.index(QRY)
        return [q - key]                                   # the same for every digit: q + m reads key + m
    sep, out = ids.index(SEP), []
    for p in range(sep + 1, len(ids), 2):                  # each query's key token
        earlier = max(i for i in range(p) if ids[i] == ids[p])
        assert ids[earlier + 1] == ids[p + 1]              # the value after it is the answer
        out.append(p - (earlier + 1))
    return out


@pytest.mark.parametrize("name", RETRIEVAL)
@pytest.mark.parametrize("length", [16, 40, 512])
def test_recorded_distance_is_the_real_one(name, length):
    task = tasks.get(name)
    for seed in range(20):
        for spread in (None, distance_edges(L)):
            ex = task.generate(seed, length, spread=spread)
            got = task.copy_distances(ex.ids)
            assert got == true_distances(name, ex.ids) and len(got) == len(answer_runs(ex.mask))
            assert got == task.copy_distances(ex.ids[:ex.ids.index(SEP) + 1] + ex.ids[ex.ids.index(SEP) + 1:])


def test_uniform_examples_are_unchanged_by_the_spread_option():
    """The kept runs' scores stay valid: without spread, the same seed gives the same example as before."""
    assert tasks.passkey.generate(5, 40).ids[19:24] == [SEP, 8, 11, 3, 10]
    assert tasks.mqar.generate(5, 40).ids[:6] == [PAD, 19, 36, 26, 64, 14]


def test_a_passkey_is_placed_at_the_distance_asked():
    for d in (4, 37, 100, 193):                            # 4: the key last; 193 = 200 - 7: the key first
        ids = tasks.passkey.generate(0, 200, spread=[d, d + 1]).ids
        assert ids.index(QRY) - (ids.index(SEP) + 1) == d and tasks.passkey.copy_distances(ids) == [d]


def test_draw_distance_covers_the_bins_evenly():
    r, edges = rng(0), [0, 4, 8, 16, 32]
    got = [draw_distance(r, edges, 2, 20) for _ in range(4000)]
    assert min(got) == 2 and max(got) == 20                # inside [lo, hi], both ends reached
    counts = [sum(a <= d < b for d in got) for a, b in zip(edges, edges[1:])]
    assert all(abs(c - 1000) < 120 for c in counts)        # four bins met, a quarter each


@pytest.mark.parametrize("name", RETRIEVAL)
def test_every_bin_is_filled_at_sixteen_l(name):
    ids, mask = examples(tasks.get(name), 16 * L, 40, spread=distance_edges(L))
    ds = [d for row in ids.tolist() for d in tasks.get(name).copy_distances(row)]
    edges = distance_edges(L)
    assert all(any(a <= d < b for d in ds) for a, b in zip(edges, edges[1:]))


@pytest.mark.parametrize("name", RETRIEVAL)
def test_a_perfect_copier_scores_100_in_every_bin_and_one_that_reaches_l_scores_0_past_it(name):
    task = tasks.get(name)
    for n in (L, 4 * L, 16 * L):
        full = by_distance(Copier(task), task, n, L, samples=40)
        short = by_distance(Copier(task, reach=L), task, n, L, samples=40)
        assert [r["answers"] for r in full] == [r["answers"] for r in short]   # the same examples
        assert sum(r["answers"] for r in full) > 0
        for r, s in zip(full, short):
            assert (r["lo"], r["hi"]) == (s["lo"], s["hi"]) and r["hi"] in DISTANCE_BINS
            if r["answers"]:
                assert r["exact"] == 1.0
                assert s["exact"] == 0.0 if s["lo"] >= 1 else s["exact"] > 0
                if name == "passkey" and s["hi"] <= 1:     # one answer per example: nothing borrowed from another
                    assert s["exact"] == 1.0
            else:
                assert r["exact"] is None and (r["lo"] >= n / L or n == 16 * L and name == "mqar")


def distance_run(task, enc, seed, at_l, bins=None):
    """A fake comparison result: exact match at_l at L = 8, and distance rows {(length, lo, hi): (right, answers)}."""
    rows = [dict(length=8, exact=at_l, token=at_l, samples=10)]
    got = dict(task=task, encoding=enc, seed=seed, rows=rows, train_s=1.0, score_s=0.5)
    if bins is not None:
        got["distance"] = {"key": {}, "rows": [dict(length=n, lo=lo, hi=hi, answers=a, right=r,
                                                     exact=r / a if a else None)
                                                for (n, lo, hi), (r, a) in bins.items()]}
    return got


def test_the_distance_table_shows_learned_runs_with_a_t_interval_over_seeds(tmp_path):
    from tasks import report
    s1 = {(8, 0, 1): (10, 10), (8, 1, 2): (0, 0), (16, 0, 1): (8, 10), (16, 1, 2): (2, 10)}   # 90%, 20%
    s2 = {(8, 0, 1): (10, 10), (8, 1, 2): (0, 0), (16, 0, 1): (10, 10), (16, 1, 2): (4, 10)}  # 100%, 40%
    results = [distance_run("passkey", "a", 1, 1.0, s1), distance_run("passkey", "a", 2, 0.96, s2),
               distance_run("passkey", "a", 3, 0.5, {k: (a, a) for k, (_, a) in s1.items()}),   # not learned: unused
               distance_run("passkey", "b", 1, 0.2, s1), distance_run("passkey", "c", 1, 1.0),
               distance_run("copy", "a", 1, 1.0)]
    settings = dict(report_dir=str(tmp_path), lengths=[8, 16], seed_list=[1, 2, 3], samples=10, jobs=1, threads=1)
    md = open(report.write_comparison(results, [], settings, 8, 60.0, "python compare.py x")).read()
    section = md.split("## Retrieval by distance")[1].split("\n## ")[0]
    assert "### copy" not in section and "|  | [0, L) | [L, 2L) |" in section
    half = 12.706 * (50 ** 0.5) / 2 ** 0.5, 12.706 * (200 ** 0.5) / 2 ** 0.5   # t(0.975, 1) sd / sqrt(2)
    assert (f"| a (2/3 seeds) | 95.0 [{95 - half[0]:.1f}, {95 + half[0]:.1f}] | "
            f"30.0 [{30 - half[1]:.1f}, {30 + half[1]:.1f}] |") in section
    assert "| a (2/3 seeds) | 20 | 10 |" in section                    # answers per run, lengths pooled
    assert "| a at 8 | 100.0 [100.0, 100.0] · 10 | — |" in section      # per length: no answer in [L, 2L) at L
    assert f"| a at 16 | 90.0 [{90 - half[0] * 2:.1f}, {90 + half[0] * 2:.1f}] · 10 | 30.0 [" in section
    assert "Left out: b: not learned; c: not measured." in section
    assert (tmp_path / "distance.png").exists() and "learned" in (tmp_path / "distance.csv").read_text()


def test_evaluate_scores_a_task_checkpoint_by_distance(tmp_path):
    import evaluate
    from tests.inproc import run_train
    args = ["configs/tasks/passkey.py", "--block_size=16", "--n_layer=1", "--n_head=2", "--n_embd=16",
            "--batch_size=2", "--eval_interval=1", "--eval_iters=1", "--warmup_iters=0", "--max_iters=1",
            "--device=cpu", f"--out_dir={tmp_path}"]
    assert run_train(args) == 0
    out = evaluate.main([str(tmp_path), "--lengths=16,64", "--samples=6", "--depths=0.5", "--distance=True"])
    rows = out["runs"][str(tmp_path)]["distance"]
    assert [(r["length"], r["lo"], r["hi"]) for r in rows] == [(n, a, b) for n in (16, 64)
                                                                for a, b in zip(DISTANCE_BINS, DISTANCE_BINS[1:])]
    assert sum(r["answers"] for r in rows) == 12                      # one answer per example and length
    md = (tmp_path / "task_scores.md").read_text()
    assert "## Retrieval by distance" in md and "| [0, L/4) |" in md and (tmp_path / "task_distance.csv").exists()


def test_distance_refuses_a_task_without_one(tmp_path, capsys):
    from tasks.score import distance_task
    with pytest.raises(ValueError, match="task copy has no key-query distance; score by distance a retrieval task "
                                         r"\(passkey, mqar\)"):
        distance_task("copy")


TINY = ["configs/tasks/distance.py", "--task_recipes={}", "--block_size=12", "--n_layer=1", "--n_head=2",
        "--n_embd=16", "--batch_size=8", "--max_iters=2", "--lr_decay_iters=2", "--warmup_iters=1",
        "--eval_interval=2", "--eval_iters=1", "--device=cpu", "--seeds=1", "--jobs=1", "--threads=1", "--samples=4",
        "--multiples=1,4", "--encodings=rope", "--tasks=passkey,copy"]


@pytest.mark.slow
def test_kept_runs_are_scored_by_distance_from_their_checkpoints_or_said_not_measured(tmp_path, monkeypatch):
    """configs/tasks/distance.py end to end at tiny size: runs kept without the distance scoring stay valid; turning
    it on scores them from their checkpoints (nothing trained again), and without a checkpoint says so."""
    import compare
    from measure import kept as kept_store
    from tasks import report
    monkeypatch.setattr(report, "MASTERY", 0.0)   # 2 iterations learn nothing; count every run as learned
    out, rep, bare = tmp_path / "out", tmp_path / "report", tmp_path / "bare"
    compare.main([*TINY, "--task_distance=False", f"--out_root={out}", f"--report_dir={rep}"])
    kept = rep / "runs" / "passkey-rope-s1337"
    assert "distance" not in kept_store.read(kept)["value"]
    shutil.copytree(rep, bare)
    ckpt = (out / "passkey" / "rope-s1337" / "ckpt.pt").stat().st_mtime_ns
    compare.main([*TINY, f"--out_root={out}", f"--report_dir={rep}"])
    assert (out / "passkey" / "rope-s1337" / "ckpt.pt").stat().st_mtime_ns == ckpt        # not trained again
    got = kept_store.read(kept)["value"]["distance"]
    assert got["key"]["bins"] == list(DISTANCE_BINS) and {r["length"] for r in got["rows"]} == {12, 48}
    assert "distance" not in kept_store.read(rep / "runs" / "copy-rope-s1337")["value"]
    md = (rep / "report.md").read_text().split("## Retrieval by distance")[1]
    assert "### passkey" in md and "| rope (1/1 seeds) |" in md and "### copy" not in md
    shutil.rmtree(out)                                                    # another machine: the kept runs alone
    compare.main([*TINY, f"--out_root={out}", f"--report_dir={bare}"])
    assert not (out / "passkey" / "rope-s1337" / "ckpt.pt").exists()
    assert "Left out: rope: not measured." in (bare / "report.md").read_text()


def test_the_distance_config_runs_are_the_full_suites_kept_runs():
    """configs/tasks/distance.py: passkey and mqar x none, rope, alibi, t5, learned x 3 seeds on the tasks' own
    recipes, distance scoring on; each of its runs is one the full suite keeps in reports/tasks-suite under the
    same key, so pointing it there scores those runs (from their checkpoints) instead of training them again."""
    import compare
    from measure import kept
    settings, train_keys, cfg = compare.parse(["configs/tasks/distance.py", "--report_dir=reports/tasks-suite"])
    runs = compare.plan(settings, train_keys)
    assert settings["task_distance"] and len(runs) == 30 and settings["seed_list"] == [1337, 1338, 1339]
    assert {(r["task"], r["encoding"]) for r in runs} == {(t, e) for t in ("passkey", "mqar")
                                                          for e in ("none", "rope", "alibi", "t5", "learned")}
    assert all(r["iters"] == {"passkey": 2500, "mqar": 8000}[r["task"]] for r in runs)
    for r in runs:
        assert kept.load(kept.folder(settings["report_dir"], r["tag"]), compare.kept_key(r, settings, train_keys, cfg),
                         compare.NOT_MEASURED) is not None, r["tag"]


def test_task_distance_is_refused_outside_the_task_suite(capsys):
    import compare
    from training.config import ConfigError
    with pytest.raises(ConfigError, match="task_distance is the task suite's"):
        compare.parse(["configs/compare_cpu.py", "--task_distance=True"])
