"""Pictures of what each positional encoding does, untrained and from trained checkpoints
(measure/encoding_plots.py's figures, drawn by its draw_all as compare.py's report shows them).

    python -m measure.plots --out=plots/                                   # d = 128, distances up to 1024
    python -m measure.plots --out=plots/ --ckpt=out-t5,out-learned         # plus trained tables
    python -m measure.plots --out=plots/ --head_dim=64 --length=4096 --bases=1e4,5e5
    python -m measure.plots --out=plots/ --entropy=out-rope,out-ssmax --length=1024     # attention entropy only

--entropy draws only the attention entropy over `length` tokens of each checkpoint's validation
data, with and without log-n scaling.
"""
import contextlib
import math
import os
import sys

import torch

from training import checkpoint
import model as model_module
from attention import plan as attention_plan
from training.cli import fail, help_text, parse
from measure.encoding_plots import draw_all, figure
from measure.evaluation import validation_tokens

OPTIONS = {
    "out": "plots",                   # the folder of the pictures
    "head_dim": 128,                  # d of the untrained encodings
    "n_head": 8,                      # heads of the untrained encodings
    "length": 1024,                   # distances (and, with entropy, tokens) drawn
    "bases": [1e4, 1e5, 1e6],         # RoPE bases of the decay and angle plots
    "factor": 4.0,                    # extension factor of the RoPE angle plot
    "ckpt": [],                       # checkpoint folders whose trained tables are drawn too
    "entropy": [],                    # checkpoint folders: only the attention-entropy picture
    "data_dir": "",                   # entropy: where the dataset is; "": the one recorded in the checkpoint
}


# ---- attention entropy against query position ------------------------------------------------
@contextlib.contextmanager
def attention_probe(record):
    """While active, every softmax attention layer of a GPT calls record(probs) with its
    attention probabilities (B, H, Tq, Tk): recomputed from the q, k and plan the kernel gets
    (same mask, bias and scaling), or taken from the explicit-softmax path."""
    attend, attend_scores = model_module.attend, attention_plan.attend_scores

    def probed_attend(q, k, v, plan, layer=0):
        if plan.pe is not None and plan.pe.overrides("attend"):   # its own logits: through attend_scores
            return attend(q, k, v, plan, layer)
        scores = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])       # (B, H, Tq, Tk)
        causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()   # (Tq, Tk)
        mask = plan.mask if plan.mask is not None else causal
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
        record(torch.softmax(scores, -1))
        return attend(q, k, v, plan, layer)

    def probed_scores(logits, v, plan):
        y, probs = attend_scores(logits, v, plan)
        record(probs.float())
        return y, probs

    model_module.attend, attention_plan.attend_scores = probed_attend, probed_scores
    try:
        yield
    finally:
        model_module.attend, attention_plan.attend_scores = attend, attend_scores


@torch.no_grad()
def attention_entropy(model, idx):
    """(T,) mean entropy (nats) of the attention distribution of each query position of idx
    (B, T), averaged over the batch, the heads and the layers."""
    layers = []                                                       # (Tq,) per softmax attention layer
    with attention_probe(lambda p: layers.append(-(p * torch.log(p.clamp_min(1e-30))).sum(-1).mean((0, 1)))):
        model(idx)
    if not layers:
        raise ValueError(f"{model.config.attention} attention has no attention weights to measure")
    return torch.stack(layers).double().mean(0)


def entropy_curves(out_dirs, length, data_dir="", batch=4):
    """{label: (T,) entropy}: each checkpoint as trained and, where it was trained without it,
    with log-n scaling switched on (an evaluation-time option); and the training length."""
    curves, train_len = {}, None
    for d in out_dirs:
        ckpt = checkpoint.load(d)
        tokens, _ = validation_tokens(ckpt, data_dir or None, "val")
        n = batch * length
        if len(tokens) < n:
            raise ValueError(f"{d}: the validation split has {len(tokens)} tokens, {n} needed; lower --length")
        idx = torch.from_numpy(tokens[:n].astype("int64")).view(batch, length)
        train_len = ckpt["model_args"]["block_size"]
        variants = {"": {}} if ckpt["model_args"].get("logn_scaling") else {"": {}, " + log-n": {"logn_scaling": True}}
        for suffix, overrides in variants.items():
            model = checkpoint.build_model(ckpt, overrides)
            if model.max_positions is not None and length > model.max_positions:
                raise ValueError(f"{d}: the {model.pos_name} encoding knows {model.max_positions} positions; "
                                 f"lower --length")
            tag = " ssmax" if model.config.ssmax else ""
            name = f"{os.path.basename(os.path.normpath(d))} ({model.pos_name}{tag}){suffix}"
            curves[name] = attention_entropy(model, idx)
    return curves, train_len


def draw_entropy(path, curves, train_len):
    with figure(path, train_len=train_len, xscale="log", xlabel="query position",
                ylabel="mean attention entropy (nats)", title="Attention entropy against query position") as ax:
        for label, h in curves.items():
            ax.plot(range(1, len(h) + 1), h.numpy(), label=label, lw=1)
    return path


def main(argv):
    try:
        doc = lambda: help_text(__doc__, "python -m measure.plots [--key=value ...]", OPTIONS,  # noqa: E731
                                [sys.modules[__name__]])
        a, _, _ = parse(argv, OPTIONS, doc=doc)
        bases = tuple(float(b) for b in a["bases"])
        if a["head_dim"] < 2 or a["head_dim"] % 2 or a["length"] < 2 or a["n_head"] < 1 or a["factor"] < 1:
            raise ValueError(f"need an even --head_dim >= 2, --length >= 2, --n_head >= 1 and --factor >= 1, got "
                             f"{a['head_dim']}, {a['length']}, {a['n_head']}, {a['factor']}")
        if a["entropy"]:
            curves, train_len = entropy_curves(a["entropy"], a["length"], a["data_dir"])
            paths = {"entropy": draw_entropy(os.path.join(a["out"], "attention_entropy.png"), curves, train_len)}
        else:
            paths = draw_all(a["out"], a["head_dim"], a["n_head"], a["length"], bases, a["ckpt"], a["factor"])
    except (ValueError, FileNotFoundError) as e:
        fail(e)
    for path in paths.values():
        print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
