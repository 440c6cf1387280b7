# The full task comparison: every task x 6 encodings, and learned, sinusoidal and RoPE with Ruoss et
# al.'s randomized positions, x 3 seeds, scored from 1x to 16x the training length with 200 samples
# per point (docs/tasks.md; its measured time: benchmarks/history.md):
#   python compare.py configs/tasks/compare.py
from configs.tasks.base import *  # noqa: F401,F403

suite = "tasks"               # compare.py's task suite: accuracy against length

tasks = ["copy", "reverse", "duplicate", "parity", "addition", "passkey", "mqar"]
# Randomized positions (Ruoss et al. 2023, https://arxiv.org/abs/2305.16843): each training sequence
# takes an ordered random subset of [0, M) as its positions; M = 512 = 16 L, the longest scored length,
# so every scored position was seen in training (learned gets a table of M rows).
variants = {f"{enc}_randomized": {"pos_encoding": enc, "position_sampling": "randomized", "max_position": 512}
            for enc in ("learned", "sinusoidal", "rope")}
encodings = ["none", "learned", "sinusoidal", "t5", "rope", "alibi", *variants]
# each task's own recipe where the base one does not learn it (configs/tasks/<task>.py, docs/tasks.md "Recipes
# that learn"); compare.py trains that task with these keys
import importlib as _importlib
_RECIPE_KEYS = ("max_iters", "lr_decay_iters", "learning_rate", "warmup_iters")
_MODEL_KEYS = ("n_layer", "n_head", "n_embd", "tie_embeddings", "embed_std")   # a model of its own (addition, mqar)
_base = _importlib.import_module("configs.tasks.base")
task_recipes = {t: {k: getattr(m, k) for k in (*_RECIPE_KEYS, *_MODEL_KEYS)
                    if k in _RECIPE_KEYS or getattr(m, k, None) != getattr(_base, k, None)}
                for t, m in ((t, _importlib.import_module(f"configs.tasks.{t}"))
                             for t in ("copy", "reverse", "passkey", "duplicate", "addition", "mqar"))}
seeds = 3
jobs = 2
out_root = "out-tasks"
report_dir = "reports/tasks-suite"   # kept runs committed here: a fresh checkout trains only the rest
samples = 200
multiples = [1, 2, 4, 8, 16]
