"""Does MQAR's key lookup fail in posgpt's model or in the recipe? posgpt's GPT (RoPE, learned positions) and
nanoGPT's GPT (a karpathy/nanoGPT checkout) trained side by side on the same batches: every example at one length
(2 pairs and 2 queries at 10 tokens), 2 layers x 4 heads x 64, AdamW without weight decay, batches of 64; per-token
accuracy on the answers of 256 held-out examples every 500 iterations.

    python benchmarks/mqar_side_by_side.py ../nanogpt --length=10 --iters=3000 --lr=1e-3
    python benchmarks/mqar_side_by_side.py ../nanogpt --length=32 --iters=30000 --models=rope   # Zoology's step budget
    python benchmarks/mqar_side_by_side.py ../nanogpt --length=32 --iters=3000 --models=rope --untied --embed_std=1.0
"""
import argparse
import importlib.util
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from model import GPT, GPTConfig  # noqa: E402
from tasks import mqar  # noqa: E402


def batch(size, first_seed, length, split):
    """x, y as tasks.data.TaskData makes them, every example `length` tokens long."""
    x, y = torch.zeros(size, length - 1, dtype=torch.long), torch.full((size, length - 1), -1)
    for i in range(size):
        ex = mqar.generate(2 * (first_seed + i) + split, length)
        ids, answer = torch.tensor(ex.ids), torch.tensor(ex.mask)
        x[i], y[i] = ids[:-1], torch.where(answer[1:], ids[1:], -1)
    return x, y


def models(nanogpt, a):
    shape = dict(n_layer=a.layers, n_head=4, n_embd=64, block_size=a.length, vocab_size=mqar.VOCAB_SIZE, dropout=0.0,
                 bias=False)
    for enc in ("rope", "learned"):
        if enc in a.models:
            torch.manual_seed(0)
            yield f"posgpt {enc}", GPT(GPTConfig(pos_encoding=enc, tie_embeddings=not a.untied, embed_std=a.embed_std,
                                                 **shape))
    if "nanogpt" not in a.models:
        return
    spec = importlib.util.spec_from_file_location("nanogpt_model", os.path.join(nanogpt, "model.py"))
    ng = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ng)
    torch.manual_seed(0)
    yield "nanoGPT", ng.GPT(ng.GPTConfig(**shape))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("nanogpt", help="a karpathy/nanoGPT checkout")
    p.add_argument("--length", type=int, default=10)
    p.add_argument("--iters", type=int, default=3000)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--embed_std", type=float, default=0.02, help="posgpt's token embedding's initial std")
    p.add_argument("--untied", action="store_true", help="posgpt with an output head of its own (nanoGPT ties)")
    p.add_argument("--models", default="rope,learned,nanogpt", help="which of rope, learned, nanogpt (in that order)")
    a = p.parse_args()
    a.models = a.models.split(",")
    unknown = set(a.models) - {"rope", "learned", "nanogpt"}
    if unknown:
        sys.exit(f"--models: unknown {sorted(unknown)}; choose from rope, learned, nanogpt")
    torch.set_num_threads(1)
    xv, yv = batch(256, 10 ** 6, a.length, 1)
    for name, m in models(a.nanogpt, a):
        opt, start = torch.optim.AdamW(m.parameters(), lr=a.lr, weight_decay=0.0), time.time()
        for it in range(a.iters + 1):
            if it % 500 == 0:
                with torch.no_grad():
                    logits = m(xv, yv)[0]
                seen = yv >= 0
                acc = (logits.argmax(-1)[seen] == yv[seen]).float().mean().item()
                print(f"{name:16s} iteration {it:6d}  answer accuracy {acc:.3f}  "
                      f"{time.time() - start:5.0f} s", flush=True)
            x, y = batch(64, 64 * it, a.length, 0)
            loss = m(x, y)[1]
            opt.zero_grad()
            loss.backward()
            opt.step()


if __name__ == "__main__":
    main()
