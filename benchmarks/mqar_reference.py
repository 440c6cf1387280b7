"""Which of GPT-2's choices keep MQAR's lookup from forming? A plain torch.nn.TransformerEncoder (pre-norm, 2
layers x 4 heads x 64, learned positions, PyTorch's own initialisation: embeddings N(0, 1)) trained on the
batches of benchmarks/mqar_side_by_side.py (every example at one length), with GPT-2's choices switched on
one by one: a final LayerNorm, the output head tied to the token embedding, embeddings and matrices drawn
with std 0.02, GELU, no biases. Prints the answer accuracy on 256 held-out examples every 250 iterations.

    python benchmarks/mqar_reference.py --length=32 --iters=1500
    python benchmarks/mqar_reference.py --length=32 --iters=1500 --final_norm --tied
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from mqar_side_by_side import batch  # noqa: E402
from tasks import mqar  # noqa: E402


class Reference(nn.Module):
    def __init__(self, a, d=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(mqar.VOCAB_SIZE, d), nn.Embedding(a.length, d)
        layer = nn.TransformerEncoderLayer(d, 4, 4 * d, 0.0, activation="gelu" if a.gelu else "relu",
                                           batch_first=True, norm_first=True, bias=not a.no_bias)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d) if a.final_norm else nn.Identity()
        self.head = nn.Linear(d, mqar.VOCAB_SIZE, bias=False)
        if a.tied:
            self.head.weight = self.tok.weight
        for name, p in self.named_parameters():
            table = name.startswith(("tok.", "pos."))
            if p.dim() == 2 and (a.small_matrices and not table or a.small_embeddings and table):
                nn.init.normal_(p, std=0.02)

    def forward(self, x):
        T = x.shape[1]
        h = self.blocks(self.tok(x) + self.pos(torch.arange(T)), mask=nn.Transformer.generate_square_subsequent_mask(T),
                        is_causal=True)
        return self.head(self.norm(h))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=int, default=32)
    p.add_argument("--iters", type=int, default=1500)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    for flag, what in (("final_norm", "a LayerNorm before the head"), ("tied", "the head is the token embedding"),
                       ("small_embeddings", "token and position tables N(0, 0.02)"),
                       ("small_matrices", "every other matrix N(0, 0.02)"), ("gelu", "GELU, not ReLU"),
                       ("no_bias", "no biases in the blocks")):
        p.add_argument(f"--{flag}", action="store_true", help=what)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    model, (xv, yv) = Reference(a), batch(256, 10 ** 6, a.length, 1)
    opt, start = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.0), time.time()
    switches = ("final_norm", "tied", "small_embeddings", "small_matrices", "gelu", "no_bias")
    switched = [k for k in switches if getattr(a, k)]
    for it in range(a.iters + 1):
        if it % 250 == 0:
            with torch.no_grad():
                seen = yv >= 0
                acc = (model(xv).argmax(-1)[seen] == yv[seen]).float().mean().item()
            print(f"{'+'.join(switched) or 'plain':28s} iteration {it:5d}  answer accuracy {acc:.3f}  "
                  f"{time.time() - start:4.0f} s", flush=True)
        x, y = batch(64, 64 * it, a.length, 0)
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=-1)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
