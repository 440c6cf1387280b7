"""The lm-evaluation-harness backend (interop/lm_eval.py) on a tiny trained run: its
loglikelihood is the sum of posgpt's token log-probabilities, its loglikelihood_rolling is
evaluate.py's non-overlapping loss times the tokens scored, generate_until is the KV-cached
greedy decode cut at the stop string, and lm_eval finds it by name."""
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model

from interop.lm_eval import PosgptLM
from measure.evaluation import evaluate_checkpoint
from tests.conftest import ROOT, TINY_TEXT
from training import checkpoint


def requests(kind, *args):
    return [Instance(request_type=kind, doc={}, arguments=a, idx=i) for i, a in enumerate(args)]


def test_loglikelihood_is_the_sum_of_token_logprobs(tiny_run):
    lm = get_model("posgpt")(out_dir=str(tiny_run))
    context, continuation = "First Citizen:\nBefore we", " proceed"   # 24 + 8 tokens: the context is cut
    (got, greedy), = lm.loglikelihood(requests("loglikelihood", (context, continuation)))
    model, ckpt = checkpoint.load_model(tiny_run)
    encode, _, _ = checkpoint.tokenizer_of(ckpt)
    ids = encode(context + continuation)[-17:]     # the last block_size (16) inputs and their targets
    with torch.no_grad():
        lp = F.log_softmax(model(torch.tensor([ids[:-1]]))[0][0], -1)
    n = len(encode(continuation))
    want = lp[-n:].gather(1, torch.tensor(ids[-n:])[:, None]).sum().item()
    assert abs(got - want) < 1e-5 and got < 0 and isinstance(greedy, bool)


def test_loglikelihood_rolling_is_evaluates_nonoverlap_loss(tiny_run, tiny_data, tmp_path):
    lm = PosgptLM(out_dir=str(tiny_run))
    tokens = np.fromfile(tiny_data / "tiny" / "val.bin", dtype=np.uint16)
    n = (len(tokens) - 1) // 16 * 16   # evaluate_checkpoint asked for more than the split scores all of it
    _, decode, _ = checkpoint.tokenizer_of(checkpoint.load(tiny_run))
    (got,) = lm.loglikelihood_rolling(requests("loglikelihood_rolling", (decode(tokens[:n + 1].tolist()),)))
    (row,) = evaluate_checkpoint(str(tiny_run), lengths=[16], tokens_per_point=10 ** 6, data_dir=str(tiny_data))
    assert row["tokens"] == n and abs(-got / n - row["loss"]) < 1e-5


def test_generate_until_is_the_greedy_decode_cut_at_the_stop(tiny_run):
    lm = PosgptLM(out_dir=str(tiny_run))
    model, ckpt = checkpoint.load_model(tiny_run)
    encode, decode, _ = checkpoint.tokenizer_of(ckpt)
    prompt = TINY_TEXT[:10]
    full = decode(model.generate(torch.tensor([encode(prompt)]), 12, top_k=1)[0, 10:].tolist())
    stop = full[3:5]
    (got, whole) = lm.generate_until(requests("generate_until", (prompt, {"until": [stop], "max_gen_toks": 12}),
                                              (prompt, {"until": ["@@"], "max_gen_toks": 12})))
    assert got == full[:full.index(stop)] and whole == full


TASK = """task: posgpt_tiny
dataset_path: json
dataset_kwargs:
  data_files:
    test: {docs}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: bits_per_byte
"""


@pytest.mark.slow
def test_lm_eval_command_line_runs_posgpt_on_a_local_task(tiny_run, tmp_path):
    docs = [TINY_TEXT[i * 50:(i + 1) * 50] for i in range(3)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    (tmp_path / "tiny.yaml").write_text(TASK.format(docs=tmp_path / "docs.jsonl"))
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    r = subprocess.run([sys.executable, "-m", "interop.lm_eval", "--model", "posgpt", "--model_args",
                        f"out_dir={tiny_run}", "--tasks", "posgpt_tiny", "--include_path", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    got = float(re.search(r"\|posgpt_tiny\|.*\|bits_per_byte\|[^|]*\|\s*([0-9.]+)\|", r.stdout).group(1))
    ll = PosgptLM(out_dir=str(tiny_run)).loglikelihood_rolling(requests("loglikelihood_rolling", *[(d,) for d in docs]))
    assert abs(got - -sum(ll) / sum(len(d.encode()) for d in docs) / math.log(2)) < 1e-3


@pytest.mark.slow
def test_the_command_without_the_extras_is_one_line():
    """A newcomer without requirements-hf.txt: one line naming the fix, exit 2, no traceback."""
    code = ("import sys, runpy; sys.modules['lm_eval'] = None; sys.argv = ['x', '--help']; "
            "runpy.run_module('interop.lm_eval', run_name='__main__')")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: lm-eval is not installed; pip install -r requirements-hf.txt (the optional extras)"], r.stderr
