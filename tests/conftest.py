"""Shared fixtures: tiny models and a tiny prepared dataset, all on CPU."""
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from data.shakespeare_char.prepare import prepare as prepare_char
from training.config import model_config
from model import GPT
from positional.base import Ctx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The test models are tiny: extra intra-op threads only wait on each other, and on a busy
# machine that made in-process training ~50x slower. Subprocesses inherit the variable.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

TINY_TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
             "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n\n") * 40


def tiny_gpt(pos="rope", seed=0, **kw):
    """A 2-layer GPT whose encoding parameters are randomised (a zero T5 table would hide bugs).
    kw: model keys and encoding settings (rope_base=..., t5_num_buckets=...)."""
    torch.manual_seed(seed)
    args = dict(block_size=32, vocab_size=40, n_layer=2, n_head=4, n_embd=32, pos_encoding=pos, rope_scaling="",
                pos_settings={})
    model = GPT(model_config(args, kw)).eval()
    with torch.no_grad():
        for p in model.pe.parameters():
            p.normal_(0, 0.5)
    return model


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """data_dir holding a prepared char-level dataset 'tiny'."""
    d = tmp_path_factory.mktemp("data")
    prepare_char(TINY_TEXT, d / "tiny")
    return d


TINY_ARGS = ["--dataset=tiny", "--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=8",
             "--max_iters=30", "--eval_interval=10", "--eval_iters=4", "--log_interval=5", "--learning_rate=1e-2",
             "--warmup_iters=2", "--min_lr=1e-3", "--device=cpu"]


def run_py(*args, env=None, timeout=300, check=True):
    """Run a repo script with this interpreter; returns the CompletedProcess. env values of None unset."""
    full_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    full_env = {k: v for k, v in full_env.items() if v is not None}  # None: unset the variable
    r = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, env=full_env, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{args} exited {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}")
    return r


@pytest.fixture(scope="session")
def tiny_run(tiny_data, tmp_path_factory):
    """An out_dir holding the ckpt.pt of a 10-step run with TINY_ARGS (trained in this process).
    Read-only: tests that damage or extend it work on a copy (tests.inproc.copy_run)."""
    import train
    out = tmp_path_factory.mktemp("tiny_run")
    train.main([*TINY_ARGS, f"--data_dir={tiny_data}", f"--out_dir={out}", "--max_iters=10"])
    return out


def rotate(pe, x, pos, key=False):
    """pe.rotate of x (B, H, T, D) at positions pos (T,): a query, or a key rotated before it is cached."""
    return pe.rotate(x, Ctx(pos, pos), key=key)


def scores(pe, q, k, q_pos, k_pos, layer=0):
    """Pre-softmax logits (B, H, Tq, Tk) as the model forms them (before the mask)."""
    if pe.overrides("attend"):
        s = pe.logits(q, k, Ctx(q_pos, k_pos), layer)
    else:
        s = rotate(pe, q, q_pos) @ rotate(pe, k, k_pos, key=True).transpose(-1, -2) / math.sqrt(q.shape[-1])
    b = pe.dense_bias(q_pos, k_pos)
    return s if b is None else s + b


def assert_decodes_like_a_recompute(model, idx, prefill, max_len=32):
    """A prefill of `prefill` tokens then one token at a time give the logits of one full forward."""
    with torch.no_grad():
        full = model(idx)[0]
        model.setup_cache(idx.shape[0], max_len)
        steps = [model(idx[:, :prefill])[0]] + [model(idx[:, t:t + 1])[0] for t in range(prefill, idx.shape[1])]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)


def trained(config, data_dir, out_dir, *args):
    """(model rebuilt from its checkpoint, checkpoint, stdout) of a TINY_ARGS run of configs/<config>.py,
    whose validation loss must fall by more than 1."""
    r = run_py("train.py", f"configs/{config}.py", *TINY_ARGS, *args, f"--data_dir={data_dir}", f"--out_dir={out_dir}")
    losses = [float(v) for v in re.findall(r"step \d+: train loss [0-9.]+, val loss ([0-9.]+)", r.stdout)]
    assert len(losses) == 4 and losses[-1] < losses[0] - 1.0, r.stdout
    ckpt = torch.load(out_dir / "ckpt.pt", weights_only=False)
    model = GPT(model_config(ckpt["model_args"]))
    model.load_state_dict(ckpt["model"])
    return model, ckpt, r.stdout


def embedded(pe, pos, n_embd):
    """(T, C) what pe.embed adds to zero token embeddings at positions pos (T,)."""
    return pe.embed(torch.zeros(1, len(pos), n_embd), Ctx(pos, pos))[0]
