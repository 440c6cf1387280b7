"""Make the legacy checkpoints that tests/test_legacy_checkpoints.py loads (issue #10).

Run ONCE, at commit 2cc827a (main before the issue-#10 redesign), from the repository root,
with data/shakespeare_char prepared (python data/shakespeare_char/prepare.py):

    python tests/legacy/make.py

It writes, under tests/legacy/:
  <name>/ckpt.pt      a tiny checkpoint exactly as that commit's train.py writes it (optimizer
                      state, rng, config and all), for each name in RUNS
  data/shakespeare_char/{val.bin,train.bin,meta.pkl}
                      the first VAL_TOKENS validation ids (and a few train ids, which the data
                      loader insists on) of data/shakespeare_char, and its meta.pkl: the test
                      scores these tokens, so it needs neither the corpus nor a working directory
  expected.json       for every (checkpoint, eval-time overrides): the losses that commit's
                      evaluate.evaluate_checkpoint gives on that data at LENGTHS (nonoverlap), and
                      the GEN_TOKENS ids model.generate gives greedily (top_k=1) from PROMPT

Do not re-run it after the redesign: the files are the record of what the old code wrote.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, ROOT)

MADE_AT = "2cc827a"
TINY = ["--n_layer=2", "--n_head=2", "--n_embd=16", "--block_size=32", "--batch_size=8",
        "--max_iters=200", "--lr_decay_iters=200", "--warmup_iters=10", "--learning_rate=1e-2",
        "--eval_iters=2", "--eval_interval=200", "--log_interval=10", "--dataset=shakespeare_char",
        "--device=cpu", "--dtype=float32", "--compile=False", "--wandb_log=False", "--seed=1337"]
RUNS = {  # name -> extra train.py arguments
    "rope": ["--pos_encoding=rope"],
    "leaky_rerope": ["--pos_encoding=rope", "--rope_scaling=leaky_rerope", "--rerope_window=16", "--rerope_leak=8"],
    "t5": ["--pos_encoding=t5"],
    "learned": ["--pos_encoding=learned"],
    "shaw": ["--pos_encoding=shaw"],
    "transformer_xl": ["--pos_encoding=transformer_xl"],
    "fire": ["--pos_encoding=fire"],
}
# eval-time overrides scored per checkpoint (besides none)
OVERRIDES = {"rope": [{"rope_scaling": "yarn", "rope_factor": 2.0}, {"rope_scaling": "ntk", "rope_factor": 2.0}]}
LENGTHS = [32, 64]
VAL_TOKENS = 1024
TRAIN_TOKENS = 2048
PROMPT = [18, 47, 56, 57, 58, 1, 15, 47, 58, 47, 64, 43, 52, 10, 0, 14]   # 16 ids; any in-vocabulary ids
GEN_TOKENS = 20
SEED = 1337


def key_of(name, overrides):
    """'rope', 'rope+rope_scaling=yarn,rope_factor=2.0': the key of expected.json."""
    return name + ("+" + ",".join(f"{k}={v}" for k, v in overrides.items()) if overrides else "")


def train_all():
    for name, extra in RUNS.items():
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "train.py", *TINY, *extra, f"--out_dir={tmp}"]
            print(" ".join(cmd), flush=True)
            subprocess.run(cmd, cwd=ROOT, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
                           stdout=subprocess.DEVNULL)
            dest = os.path.join(HERE, name)
            os.makedirs(dest, exist_ok=True)
            shutil.copyfile(os.path.join(tmp, "ckpt.pt"), os.path.join(dest, "ckpt.pt"))  # nothing else


def write_data():
    src = os.path.join(ROOT, "data", "shakespeare_char")
    dst = os.path.join(HERE, "data", "shakespeare_char")
    os.makedirs(dst, exist_ok=True)
    np.fromfile(os.path.join(src, "val.bin"), dtype=np.uint16)[:VAL_TOKENS].tofile(os.path.join(dst, "val.bin"))
    np.fromfile(os.path.join(src, "train.bin"), dtype=np.uint16)[:TRAIN_TOKENS].tofile(os.path.join(dst, "train.bin"))
    shutil.copyfile(os.path.join(src, "meta.pkl"), os.path.join(dst, "meta.pkl"))


def expected():
    import evaluate
    from sample import load_model
    data_dir = os.path.join(HERE, "data")
    out = {"made_at": MADE_AT, "lengths": LENGTHS, "prompt": PROMPT, "gen_tokens": GEN_TOKENS, "seed": SEED,
           "cases": {}}
    for name in RUNS:
        for ov in [{}] + OVERRIDES.get(name, []):
            ckpt_dir = os.path.join(HERE, name)
            rows = evaluate.evaluate_checkpoint(ckpt_dir, lengths=LENGTHS, mode="nonoverlap", overrides=ov,
                                                device="cpu", data_dir=data_dir)
            losses = {str(r["length"]): (None if r["loss"] != r["loss"] else r["loss"]) for r in rows}
            model, _ = load_model(ckpt_dir, ov, "cpu")
            gen = torch.Generator().manual_seed(SEED)
            ids = model.generate(torch.tensor([PROMPT]), GEN_TOKENS, temperature=1.0, top_k=1, generator=gen)
            out["cases"][key_of(name, ov)] = {"checkpoint": name, "overrides": ov, "losses": losses,
                                              "tokens": rows[0]["tokens"], "greedy": ids[0, len(PROMPT):].tolist()}
            print(key_of(name, ov), losses, flush=True)
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    torch.set_num_threads(1)
    train_all()
    write_data()
    expected()
