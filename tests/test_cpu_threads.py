"""cpu_threads: the intra-op thread count a CPU process computes with: given, or one per core
that other processes leave idle, read from the machine's CPU times."""
import pytest
import torch

from training import cpu_threads
from tests.conftest import TINY_ARGS
from tests.inproc import run_train


@pytest.fixture
def two_cores(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu_threads.time, "sleep", lambda s: None)
    before = torch.get_num_threads()
    yield monkeypatch
    torch.set_num_threads(before)


def machine(monkeypatch, *snapshots):
    """cpu_times returns these (all, idle) jiffies in turn."""
    it = iter(snapshots)
    monkeypatch.setattr(cpu_threads, "cpu_times", lambda: next(it))


@pytest.mark.parametrize("idle, want", [(200, 2), (140, 1), (100, 1), (20, 1), (170, 2)])
def test_one_thread_per_core_left_idle(two_cores, idle, want):
    """200 jiffies over the sample on 2 cores: idle 200 = nothing else running; 100 = one core busy."""
    machine(two_cores, (1000, 500), (1200, 500 + idle))
    said = cpu_threads.choose(0, "cpu")
    assert torch.get_num_threads() == want
    busy = 2 * (1 - idle / 200)
    assert said == f"{want} thread(s): 2 cores, {busy:.1f} busy with other work now; --threads=N to choose"


def test_the_sample_reads_the_idle_columns_of_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 1 20 300 5 0 4 0 0 0\ncpu0 5 0 10 150 2 0 2 0 0 0\n")
    assert cpu_threads.cpu_times(str(stat)) == (340, 305)
    assert cpu_threads.cpu_times(str(tmp_path / "absent")) is None


def test_a_given_count_or_default_is_not_sampled(two_cores):
    machine(two_cores)   # any sample would raise StopIteration
    assert cpu_threads.choose(2, "cpu") == "2 thread(s): --threads" and torch.get_num_threads() == 2
    assert cpu_threads.choose(0, "cpu", default=1) == "1 thread(s): the default here, --threads=N to choose"
    two_cores.setenv("OMP_NUM_THREADS", "2")
    assert cpu_threads.choose(0, "cpu") == "2 thread(s): OMP_NUM_THREADS" and torch.get_num_threads() == 2
    assert cpu_threads.choose(0, "cuda") is None


def test_without_proc_stat_torch_keeps_its_default(two_cores):
    machine(two_cores, None, None)
    n = torch.get_num_threads()
    assert cpu_threads.choose(0, "cpu") == f"{n} thread(s): the default here, --threads=N to choose"


@pytest.mark.parametrize("idle, said", [(100, "note: 1.0 of 2 cores are busy with other work now"), (190, None)])
def test_the_busy_note_says_how_many_cores_other_work_holds(two_cores, idle, said):
    machine(two_cores, (1000, 500), (1200, 500 + idle))   # idle 100 of 200: one core busy; 190: 0.1 busy
    note = cpu_threads.busy_note()
    assert note == said if said is None else note.startswith(said) and "runs slower than on a quiet machine" in note


def test_train_says_the_machine_is_busy_before_training(two_cores, tiny_data, tmp_path, capsys):
    machine(two_cores, (1000, 500), (1200, 560))   # 1.4 of 2 cores busy
    argv = [*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={tmp_path}", "--max_iters=1", "--eval_interval=1"]
    assert run_train(argv) == 0
    assert "note: 1.4 of 2 cores are busy with other work now, so training runs slower" in capsys.readouterr().out
