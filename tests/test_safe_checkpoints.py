"""Checkpoints load with torch.load(weights_only=True): a trained run's ckpt.pt as it is,
an older one through the numpy allow-list only, and a file whose pickle would run code
is refused in one line without running it."""
import glob
import os
import shutil

import pytest
import torch

from tests.inproc import run_train, sample_error
from tests.conftest import TINY_ARGS
from training import checkpoint
from training.runtime import rng_state, seed_all, set_rng_state

LEGACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "legacy")


class Payload:
    """Unpickling this calls os.system: what a malicious checkpoint carries."""
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_trained_checkpoint_is_plain_data(tiny_run):
    ckpt = torch.load(checkpoint.path_in(tiny_run), weights_only=True)   # torch's own safe loader
    assert ckpt["iter_num"] == 10 and ckpt["config"]["n_embd"] == 32 and "stoi" in ckpt["tokenizer"]
    assert isinstance(ckpt["rng"][0]["numpy"][1], torch.Tensor) and ckpt["optimizer"]["state"]


def test_rng_states_round_trip_exactly():
    gen = seed_all(7)
    state = rng_state(gen)
    a = (torch.rand(3), torch.randint(0, 1000, (3,), generator=gen), __import__("numpy").random.rand(3),
         __import__("random").random())
    set_rng_state(state, gen)
    b = (torch.rand(3), torch.randint(0, 1000, (3,), generator=gen), __import__("numpy").random.rand(3),
         __import__("random").random())
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and (a[2] == b[2]).all() and a[3] == b[3]


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(LEGACY, "*", "ckpt.pt"))))
def test_legacy_checkpoints_load_through_the_allow_list(path):
    with pytest.raises(Exception):   # torch alone refuses them: their numpy RNG state
        torch.load(path, weights_only=True)
    ckpt = checkpoint.load(os.path.dirname(path))
    assert ckpt["iter_num"] == 200 and "optimizer" in ckpt
    set_rng_state(ckpt["rng"], torch.Generator())   # an old numpy state (an ndarray) still restores


def test_a_checkpoint_that_would_run_code_is_refused(tiny_run, tmp_path, capsys):
    marker = tmp_path / "pwned"
    ckpt = torch.load(checkpoint.path_in(tiny_run), weights_only=True)
    ckpt["config"]["note"] = Payload(marker)
    bad = tmp_path / "bad"
    torch.save(ckpt, checkpoint.path_in(bad) if bad.mkdir() is None else None)
    with pytest.raises(checkpoint.CheckpointError) as e:
        checkpoint.load(bad)
    msg = str(e.value)
    assert msg.startswith(f"refusing to load {checkpoint.path_in(bad)}: its pickle calls posix.system")
    assert "\n" not in msg and not marker.exists()
    err = sample_error([f"--out_dir={bad}", "--max_new_tokens=2"], capsys)   # every tool: one line, exit 2
    assert "posix.system" in err and not marker.exists()


def test_resumed_legacy_run_saves_a_safe_checkpoint(tmp_path):
    out = tmp_path / "rope"
    shutil.copytree(os.path.join(LEGACY, "rope"), out)
    shutil.copytree(os.path.join(LEGACY, "data"), tmp_path / "data")   # training writes a lock file beside the data
    argv = [f"--out_dir={out}", f"--data_dir={tmp_path / 'data'}", "--dataset=shakespeare_char",
            "--init_from=resume", "--max_iters=202", "--eval_interval=2", "--eval_iters=1", "--device=cpu"]
    old = checkpoint.load(out)["model_args"]
    argv += [f"--{k}={old[k]}" for k in ("n_layer", "n_head", "n_embd", "block_size")]
    assert run_train(argv) == 0
    assert torch.load(checkpoint.path_in(out), weights_only=True)["iter_num"] == 202
