"""Pictures of what each positional encoding does, untrained and from trained checkpoints.

    python plots.py --out=plots/                                   # d = 128, distances up to 1024
    python plots.py --out=plots/ --ckpt=out-t5,out-learned         # plus trained tables
    python plots.py --out=plots/ --head_dim=64 --length=4096 --bases=1e4,5e5

Options (cli.py's convention): out (plots), head_dim (128), n_head (8), length (1024),
bases (1e4,1e5,1e6), factor (4: extension factor of the RoPE angle plot), ckpt (comma-
separated out dirs). The numbers and figures are positional/plot.py's, which receives the
encoding objects built or loaded here; compare_report.py draws the same set.
"""
import os
import sys

import checkpoint
import positional
from cli import fail, parse
from model import GPTConfig
from positional.plot import (bias_by_distance, draw_bias_per_head, draw_expected_logits, draw_rope_angles,
                             draw_rope_decay, draw_similarity, position_table)

OPTIONS = dict(out="plots", head_dim=128, n_head=8, length=1024, bases=[1e4, 1e5, 1e6], factor=4.0, ckpt=[])


def build_untrained(name, head_dim, n_head, length):
    """An encoding from the registry, built for head_dim x n_head and `length` positions."""
    return positional.build(GPTConfig(block_size=length, n_head=n_head, n_embd=head_dim * n_head, pos_encoding=name))


def load_trained(out_dir):
    """(label, (encoding, head_dim)) of a checkpoint written by train.py (checkpoint.load_model)."""
    model, _ = checkpoint.load_model(out_dir)
    return f"{model.pe.name} (trained)", (model.pe.eval(), model.config.n_embd // model.config.n_head)


def draw_all(out, head_dim=128, n_head=8, length=1024, bases=(1e4, 1e5, 1e6), checkpoints=(), factor=4.0):
    """Every figure into folder `out`; returns {figure name: path}. Encodings with
    parameters are drawn only from trained checkpoints (an untrained table says nothing).
    The RoPE angle plot extends a training length of length / factor to `length`."""
    train_len = max(1, round(length / factor))
    paths = {"rope_decay": draw_rope_decay(os.path.join(out, "rope_decay.png"), head_dim, length, bases),
             "rope_angles": draw_rope_angles(os.path.join(out, "rope_angles.png"), head_dim, bases[0],
                                             train_len, factor)}
    fixed = {}
    for name in positional.REGISTRY:
        pe = build_untrained(name, head_dim, n_head, length)
        if not any(True for _ in pe.parameters()):
            fixed[name] = (pe, head_dim)
    trained = dict(load_trained(d) for d in checkpoints)
    trained = {k: v for k, v in trained.items() if any(True for _ in v[0].parameters())}  # fixed ones: drawn above
    every = {**fixed, **trained}
    unbounded = {k: v for k, v in every.items() if v[0].max_positions is None or v[0].max_positions >= length}
    paths["expected_logits"] = draw_expected_logits(os.path.join(out, "expected_logits.png"), unbounded, length)
    for label, (pe, _) in every.items():
        slug = label.split(" ")[0] + ("_trained" if label in trained else "")
        n = min(length, pe.max_positions or length)
        bias = bias_by_distance(pe, n)
        if bias is not None:
            paths[f"{slug}_bias"] = draw_bias_per_head(os.path.join(out, f"{slug}_bias.png"), bias,
                                                       f"{label}: bias per head against distance")
        table = position_table(pe, min(n, 256))
        if table is not None:
            paths[f"{slug}_similarity"] = draw_similarity(os.path.join(out, f"{slug}_similarity.png"), table,
                                                          f"{label}: cosine similarity of positions")
    return paths


def main(argv):
    try:
        a, _, _ = parse(argv, OPTIONS, doc=__doc__)
        bases = tuple(float(b) for b in a["bases"])
        if a["head_dim"] < 2 or a["head_dim"] % 2 or a["length"] < 2 or a["n_head"] < 1 or a["factor"] < 1:
            raise ValueError(f"need an even --head_dim >= 2, --length >= 2, --n_head >= 1 and --factor >= 1, got "
                             f"{a['head_dim']}, {a['length']}, {a['n_head']}, {a['factor']}")
        paths = draw_all(a["out"], a["head_dim"], a["n_head"], a["length"], bases, a["ckpt"], a["factor"])
    except (ValueError, FileNotFoundError) as e:
        fail(e)
    for path in paths.values():
        print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
