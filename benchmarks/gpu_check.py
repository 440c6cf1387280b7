"""The CUDA paths of issue #22 checked against the CPU's, on a GPU machine (benchmarks/gpu.sh runs it first).

For every encoding, the same model (one seed, its weights copied) on the CPU and on --device, float32:
  eval    a no-grad forward with the loss at --eval_T tokens (past ATTENTION_BLOCK: the long paths),
          with the whole context and with a window and sinks
  train   the loss and every gradient at --train_T tokens (FlexAttention's backward on CUDA for the biases)
  decode  --gen greedy tokens of the static step against the forward's path, on the device
One row per encoding and window: the kernels the device's plans chose, the largest differences, whether the
tokens agree. Nothing is asserted: the rows are the record (benchmarks/raw/gpu/).
    python benchmarks/gpu_check.py --device=cuda
    python benchmarks/gpu_check.py --device=cpu --encodings=alibi,rope --eval_T=300   # the script itself, anywhere
"""
import copy
import json
import os
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository root
import torch  # noqa: E402

import model as model_mod  # noqa: E402
from attention import plan as attention_plan  # noqa: E402
import positional  # noqa: E402
from training.cli import fail, help_text, parse, pick_device  # noqa: E402
from training.config import ConfigError  # noqa: E402


def options():
    return dict(device="cuda", encodings=",".join(positional.REGISTRY), eval_T=1536, train_T=256, gen=24,
                window=96, sinks=4, n_layer=2, n_head=4, n_embd=64, block_size=256, vocab_size=65, seed=1337,
                json="")


def kernels_of(run):
    """run() -> (its result, the kernels its plans chose, in order of first use)."""
    seen, choose = [], attention_plan.choose_kernel

    def record(plan):
        k = choose(plan)
        seen.append(k) if k not in seen else None
        return k
    attention_plan.choose_kernel = record
    try:
        return run(), seen
    finally:
        attention_plan.choose_kernel = choose


def rel(a, b):
    """max |a - b| / max |b| (0 when both vanish)."""
    a, b = a.detach().float().cpu(), b.detach().float().cpu()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def check(args, name, window, sinks):
    cfg = model_mod.GPTConfig(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd,
                              block_size=args.block_size, vocab_size=args.vocab_size, pos_encoding=name,
                              dropout=0.0, bias=False, window=window, sinks=sinks)
    torch.manual_seed(args.seed)
    cpu = model_mod.GPT(cfg)
    dev = copy.deepcopy(cpu).to(args.device)
    g = torch.Generator().manual_seed(args.seed)
    T = args.eval_T if cpu.max_positions is None else min(args.eval_T, cpu.max_positions)
    idx = torch.randint(args.vocab_size, (1, T + 1), generator=g)
    row = dict(encoding=name, window=window, sinks=sinks, eval_T=T)
    t0 = time.perf_counter()
    with torch.no_grad():
        ref = cpu.eval()(idx[:, :-1], idx[:, 1:])
        x_dev, y_dev = idx[:, :-1].to(args.device), idx[:, 1:].to(args.device)
        out, row["eval_kernels"] = kernels_of(lambda: dev.eval()(x_dev, y_dev))
    row["eval_logits_rel"], row["eval_loss_diff"] = rel(out[0], ref[0]), abs(out[1].item() - ref[1].item())
    x = idx[:, :args.train_T + 1]
    cpu.train(), dev.train()
    cpu(x[:, :-1], x[:, 1:])[1].backward()
    loss, row["train_kernels"] = kernels_of(lambda: dev(x[:, :-1].to(args.device), x[:, 1:].to(args.device))[1])
    loss.backward()
    row["train_grad_rel"] = max(rel(pd.grad, pc.grad) for pc, pd in zip(cpu.parameters(), dev.parameters())
                                if pc.grad is not None)
    start = idx[:, :8].to(args.device)
    dev.eval()
    static = dev.generate(start, args.gen, top_k=1, static=True)
    forward = dev.generate(start, args.gen, top_k=1, static=False)
    row["decode_static_eq_forward"] = bool(torch.equal(static, forward))
    row["s"] = time.perf_counter() - t0
    return row


def main(argv=None):
    def doc():
        return help_text(__doc__, "python benchmarks/gpu_check.py [--key=value ...]", options(), [options])
    try:
        args = SimpleNamespace(**parse(sys.argv[1:] if argv is None else argv, options(), doc=doc)[0])
        args.device = pick_device(args.device)
        unknown = [n for n in args.encodings.split(",") if n not in positional.REGISTRY]
        if unknown:
            raise ConfigError(f"unknown encoding {unknown[0]!r}; valid: {', '.join(positional.REGISTRY)}")
    except ValueError as e:
        fail(e)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    print(f"device {name}, torch {torch.__version__}", flush=True)
    print(f"{'encoding':<18}{'W':>4} {'eval kernels':<18}{'logits rel':>11}{'loss diff':>10} "
          f"{'train kernels':<18}{'grad rel':>10}{'decode':>7}{'s':>6}", flush=True)
    rows = []
    for enc in args.encodings.split(","):
        for window, sinks in ((0, 0), (args.window, args.sinks)):
            try:
                r = check(args, enc, window, sinks)
            except Exception as e:   # noqa: BLE001  the record says what failed, the other rows go on
                r = dict(encoding=enc, window=window, error=f"{type(e).__name__}: {str(e)[:300]}")
                print(f"{enc:<18}{window:>4} ERROR {r['error']}", flush=True)
            else:
                print(f"{enc:<18}{window:>4} {','.join(r['eval_kernels']):<18}{r['eval_logits_rel']:11.1e}"
                      f"{r['eval_loss_diff']:10.1e} {','.join(r['train_kernels']):<18}{r['train_grad_rel']:10.1e}"
                      f"{'same' if r['decode_static_eq_forward'] else 'DIFF':>7}{r['s']:6.1f}", flush=True)
            rows.append(r)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(dict(device=name, torch=torch.__version__, args=vars(args), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
