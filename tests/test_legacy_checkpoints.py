"""Checkpoints written before the issue-#10 redesign still load, score and sample.

The checkpoints under tests/legacy/ were made by tests/legacy/make.py at commit 2cc827a
(main before the redesign): tiny (2 layers, n_embd 16, block 32, 200 iterations) runs of
rope, leaky_rerope (trained with rope_scaling=leaky_rerope), t5, learned, shaw,
transformer_xl and fire, each ckpt.pt exactly as that commit's train.py wrote it, optimizer
state included. expected.json holds what that commit's evaluate.evaluate_checkpoint gave on
tests/legacy/data (the first 1,024 validation ids of shakespeare_char) at lengths 32 and 64,
nonoverlap, also with eval-time yarn/ntk x2 on rope, and the 20 ids that model.generate gave
greedily (top_k=1) from a fixed prompt. Never regenerate these files: they are the record.

When the loading or evaluation API changes, only `load` and `losses` below should change.
"""
import json
import math
import os
import pickle

import numpy as np
import pytest
import torch

LEGACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "legacy")
DATA_DIR = os.path.join(LEGACY, "data")        # data_dir holding shakespeare_char/{val,train}.bin, meta.pkl
with open(os.path.join(LEGACY, "expected.json")) as f:
    EXPECTED = json.load(f)
CASES = EXPECTED["cases"]
with open(os.path.join(DATA_DIR, "shakespeare_char", "meta.pkl"), "rb") as f:
    VOCAB_SIZE = pickle.load(f)["vocab_size"]


def as_then(overrides):
    """2cc827a's yarn and ntk_by_parts ramped by turns within L; today's default ramp is the
    index ramp of Hugging Face and the YaRN authors (issue #11), so ask for the old one."""
    if overrides.get("rope_scaling") in ("yarn", "ntk_by_parts"):
        return {**overrides, "rope_ramp": "turns"}
    return overrides


def load(ckpt_dir, overrides):
    """The model of ckpt_dir with eval-time overrides, on CPU, in eval mode."""
    from training.checkpoint import load_model
    return load_model(ckpt_dir, as_then(overrides), "cpu")[0]


def losses(ckpt_dir, overrides, lengths):
    """{length: mean validation loss (nan where the encoding has no positions)} on DATA_DIR's val split,
    every target of it as 2cc827a scored them (today's evaluate_checkpoint scores whole chunks of the
    longest length, so it leaves the split's last 63 targets out): nonoverlap windows, the last sliding back."""
    from measure import evaluation
    model = load(ckpt_dir, overrides)
    tokens = np.fromfile(os.path.join(DATA_DIR, "shakespeare_char", "val.bin"), dtype=np.uint16).astype(np.int64)
    out = {}
    for n in lengths:
        if model.max_positions is not None and n > model.max_positions:   # past a position table: n/a
            out[n] = math.nan
            continue
        nll, ids = evaluation.score(model, tokens, evaluation.spans(len(tokens) - 1, n, n), n)
        out[n] = nll.sum().item() / len(ids)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_legacy_checkpoint_scores_as_before(case):
    want = CASES[case]
    got = losses(os.path.join(LEGACY, want["checkpoint"]), want["overrides"], EXPECTED["lengths"])
    for length, loss in want["losses"].items():
        have = got.get(int(length), float("nan"))
        if loss is None:        # past a position table: reported as n/a
            assert math.isnan(have), f"{case} at length {length}: {have}, expected n/a"
        else:
            assert abs(have - loss) < 1e-4, f"{case} at length {length}: loss {have:.6f}, expected {loss:.6f}"


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_legacy_checkpoint_samples_as_before(case):
    want = CASES[case]
    model = load(os.path.join(LEGACY, want["checkpoint"]), want["overrides"])
    prompt, n = torch.tensor([EXPECTED["prompt"]]), EXPECTED["gen_tokens"]
    gen = torch.Generator().manual_seed(EXPECTED["seed"])
    greedy = model.generate(prompt, n, temperature=1.0, top_k=1, generator=gen)[0, prompt.shape[1]:].tolist()
    assert greedy == want["greedy"], f"{case}: greedy continuation changed"
    sampled = model.generate(prompt, n, temperature=1.0, top_k=None, generator=gen)[0, prompt.shape[1]:]
    assert sampled.shape == (n,) and 0 <= int(sampled.min()) and int(sampled.max()) < VOCAB_SIZE
