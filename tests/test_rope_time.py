"""tools/rope_time.py: a RoPE run's seconds beside each cell of an encoding's long-evaluation JSON
(benchmarks/long_new.sh, benchmarks/long.sh), and a one-line refusal when the RoPE run lacks a length."""
import json

import pytest

from tools.rope_time import main


def test_each_length_gets_the_rope_seconds_at_that_length(tmp_path):
    rope, run = tmp_path / "rope.json", tmp_path / "dape.json"
    rope.write_text(json.dumps({"long": {"rope": {"16384": {"s": 6.5}, "65536": {"s": 61.0}}}}))
    run.write_text(json.dumps({"args": {"x": 1}, "long": {"dape": {"16384": {"s": 30.0}, "65536": {"s": 400.0}}}}))
    main([str(rope), str(run)])
    got = json.loads(run.read_text())
    assert got["long"]["dape"] == {"16384": {"s": 30.0, "rope_s": 6.5}, "65536": {"s": 400.0, "rope_s": 61.0}}
    assert got["args"] == {"x": 1}


def test_a_length_the_rope_run_lacks_is_refused_in_one_line(tmp_path):
    rope, run = tmp_path / "rope.json", tmp_path / "path.json"
    rope.write_text(json.dumps({"long": {"rope": {"16384": {"s": 6.5}}}}))
    run.write_text(json.dumps({"long": {"path": {"32768": {"s": 99.0}}}}))
    with pytest.raises(SystemExit) as e:
        main([str(rope), str(run)])
    assert "no 32768-token run" in str(e.value) and "\n" not in str(e.value)
