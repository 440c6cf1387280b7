"""compare.py's retrieval probe (comparison/probe.py) on tiny data: a result kept without it stays valid (no
retraining) and gets it measured from its checkpoint when the probe is asked for; the report's probe table and
files; a kept probe of other keys without a checkpoint is "not measured"."""
import os

import pytest

from measure import kept as kept_store
from tests.conftest import TINY_ARGS, run_py
from tests.test_compare import args

PROBE = ["--retrieval_probe=True", "--probe_spans=6", "--probe_span=4", "--probe_distances=[0.25,1,4]"]


@pytest.mark.slow
def test_the_probe_joins_a_kept_run_and_its_report(tiny_data, tmp_path):
    out, env = tmp_path / "cmp", {"OMP_NUM_THREADS": "1"}
    base = [*args(tiny_data, out, "--only=rope", "--rope_scalings=[]", "--max_iters=10", "--plots=False")]
    assert "--block_size=16" in TINY_ARGS
    run_py(*base, env=env)
    report = (out / "report" / "report.md").read_text()
    assert "## Retrieval probe" in report and "Not measured (retrieval_probe = False" in report

    r = run_py(*base, *PROBE, env=env)
    assert "[1/1 rope s1337] kept in" in r.stdout and "measured what it lacked" in r.stdout
    assert "training" not in r.stdout                                       # the kept run is not trained again
    kept = kept_store.read(out / "report" / "runs" / "rope-s1337")
    rows = kept["value"]["probe"]["rows"]["rope"]
    assert [row["distance"] for row in rows] == [4, 16, 64]
    assert [row["in_range"] for row in rows] == [True, False, False]
    assert all(len(row["probe"]) == len(row["control"]) == 6 for row in rows)
    report = (out / "report" / "report.md").read_text()
    table = [line for line in report.splitlines() if line.startswith("| rope | ")]
    assert [line.split(" | ")[1:4] for line in table] == [["4", "0.25", "11"], ["16", "1", "23"], ["64", "4", "71"]]
    assert "- rope: in-range gain " in report   # with the void verdict of its row
    assert all((out / "report" / name).exists() for name in ("retrieval_probe.csv", "retrieval_probe_windows.csv",
                                                             "retrieval_probe.png"))
    r = run_py(*base, *PROBE, env=env)
    assert "[1/1 rope s1337] kept in" in r.stdout and "skipped" in r.stdout   # the same keys: nothing measured

    os.remove(out / "rope-s1337" / "ckpt.pt")                               # a run kept from another machine
    r = run_py(*base, *PROBE[:-1], "--probe_distances=[0.5]", env=env)
    assert "skipped" in r.stdout and "training" not in r.stdout
    report = (out / "report" / "report.md").read_text()
    assert "checkpoints are not on this machine" in report and "| rope | 8 |" not in report
