"""cpu_threads: the intra-op thread count a CPU process computes with, measured when not given."""
import time

import pytest
import torch

import cpu_threads


@pytest.fixture
def restore_threads(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_threads.os, "cpu_count", lambda: 2)
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def probe_fastest_at(n_fast, calls):
    """A probe that takes 1 ms under n_fast threads and 20 ms under any other count."""
    def probe():
        calls.append(torch.get_num_threads())
        time.sleep(0.001 if torch.get_num_threads() == n_fast else 0.02)
    return probe


@pytest.mark.parametrize("n_fast", [1, 2])
def test_the_measured_faster_count_is_kept(restore_threads, n_fast):
    calls = []
    said = cpu_threads.choose(0, "cpu", probe=probe_fastest_at(n_fast, calls))
    assert torch.get_num_threads() == n_fast
    assert said.startswith(f"{n_fast} thread(s): measured fastest now (1: ") and "2: " in said
    assert sorted(calls) == [1] * 4 + [2] * 4     # one untimed call and three timed ones per count
    assert calls[2:] == [1, 2, 1, 2, 1, 2]          # the timed calls alternate


def test_a_given_count_is_not_measured(restore_threads, monkeypatch):
    calls = []
    assert cpu_threads.choose(2, "cpu", probe=probe_fastest_at(1, calls)) == "2 thread(s): --threads"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_threads.choose(0, "cpu", probe=probe_fastest_at(2, calls)) == "1 thread(s): OMP_NUM_THREADS"
    assert calls == [] and torch.get_num_threads() == 1


def test_fastest_reports_the_median_per_count(restore_threads):
    timed = cpu_threads.fastest(probe_fastest_at(2, []), [1, 2], repeats=3)
    assert set(timed) == {1, 2}
    assert timed[2] < 0.015 <= timed[1]
