"""Issue #52 item 4: the figures a GPU session should bring back, per encoding, in about five minutes, one command.

    python benchmarks/device.py --out=benchmarks/raw/device            # on the GPU machine (CUDA)
    python benchmarks/device.py --tiny                                 # the same script at tiny sizes, on the CPU
    python benchmarks/device.py --encodings=rope,alibi --budget=120 --sections=decode

Each encoding runs in a subprocess of its own, stopped after --cap seconds (0: --budget shared by the encodings,
at least 10 s each), so one slow encoding (a compilation, a kernel that does not fit) costs only its share; what it
measured before the cap is kept. Within an encoding the --sections come in the order given:
  decode  tokens/s of --gen_tokens greedy tokens after a --prompt-token prompt, at each of --decode_batches (batch B:
          B streams decoded together, B x gen_tokens tokens): `eager` (GPT.forward with the growing cache, the
          reference step), `static` (generate.py's static step), `graph` (that step in a CUDA graph,
          generate.CUDAGraphStep; CUDA only) and `nanogpt` (nanoGPT's generate loop: the whole text, cropped to
          block_size, recomputed for every token, no cache; implemented here); and whether each mode drew the
          static step's tokens
  train   a training step (forward, backward, AdamW) at each of --train_blocks, --train_tokens tokens a step:
          tokens/s, model FLOPs utilisation (CUDA and bfloat16: flops_per_token against the card's peak),
          peak memory
  eval    a no-grad forward with the loss of one sequence of each of --eval_lengths tokens: seconds, peak memory
          (lengths past the encoding's positions: n/a)
Every figure is printed as it is measured and appended as one JSON line to OUT/device.jsonl (started afresh, the
machine first); the tables at the end are read back from that file. The models, the timed forward and the peak
memory are bench.py's (measure/bench_common.py: random init, seed fixed; CUDA's peak allocated, on the CPU the
process's peak resident set). A figure that needs CUDA reads "unmeasured (no CUDA)".
"""
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository root
import torch  # noqa: E402

from measure import bench_common  # noqa: E402
import positional  # noqa: E402
from generate import CUDAGraphStep, Decoder, sample_next  # noqa: E402
from measure.bench_decode import machine_name  # noqa: E402
from training.cli import autocast, fail, help_text, parse, pick_device, pick_dtype  # noqa: E402
from training.config import ConfigError  # noqa: E402

SECTIONS = ("decode", "train", "eval")
NO_CUDA = "unmeasured (no CUDA)"
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0}   # dense bfloat16, NVIDIA's data sheets (SXM)
TINY = dict(n_layer=2, n_head=2, n_embd=64, vocab_size=65, train_blocks="64,128", train_tokens=1024,
            eval_lengths="512", decode_batches="1,4", gen_tokens=24, encodings="rope,alibi,learned,fox",
            budget=150, steps=2)


def options():
    return dict(
        tiny=False,                      # tiny sizes on the CPU (TINY): the script checked anywhere in a minute or two
        out="benchmarks/raw/device",     # the folder of device.jsonl
        encodings=",".join(positional.REGISTRY),   # each in a subprocess of its own
        sections="decode,train,eval",    # of decode, train, eval, measured in this order
        budget=300,                      # seconds for all the encodings together
        cap=0,                           # seconds for one encoding's subprocess; 0: budget / encodings, at least 10
        device="auto",                   # auto: cuda, then mps, then cpu
        dtype="auto",                    # autocast dtype: auto (bfloat16 on CUDA), float32 or bfloat16
        n_layer=6,                       # model shape
        n_head=6,                        # attention heads
        n_embd=384,                      # width
        vocab_size=50304,                # GPT-2's vocabulary, padded (nanoGPT)
        train_blocks="1024,4096",        # train: sequence lengths
        train_tokens=16384,              # train: tokens a step (batch = train_tokens // block)
        steps=3,                         # train: timed steps after one warm-up step
        eval_lengths="16384,65536",      # eval: tokens of the one sequence
        decode_batches="1,64",           # decode: streams decoded together
        gen_tokens=128,                  # decode: tokens generated per stream
        prompt=16,                       # decode: prompt tokens per stream
        peak_tflops=0.0,                 # the card's peak for MFU; 0: from its name (PEAK_TFLOPS), bfloat16 only
        seed=1337,                       # model initialisation and prompts
        one="",                          # (internal) measure this encoding in this process
    )


def parse_args(argv):
    """-> namespace of options, --tiny's sizes filling the options not given."""
    usage = "python benchmarks/device.py [--key=value ...]"
    doc = lambda: help_text(__doc__, usage, options(), [options])  # noqa: E731
    argv = ["--tiny=True" if a == "--tiny" else a for a in argv]   # the flag alone, as the docstring writes it
    args = parse(argv, options(), doc=doc)[0]
    given = {a[2:].split("=")[0] for a in argv if a.startswith("--")}
    if args["tiny"]:
        args.update({k: v for k, v in TINY.items() if k not in given})
        args["device"] = args["device"] if "device" in given else "cpu"
    args = SimpleNamespace(**args)
    args.device = pick_device(args.device)
    args.dtype = pick_dtype(args.dtype, args.device.split(":")[0])
    if args.dtype not in ("float32", "bfloat16"):
        raise ConfigError(f"--dtype must be auto, float32 or bfloat16, got {args.dtype!r}")
    for name in args.encodings.split(","):
        if name not in positional.REGISTRY:
            raise ConfigError(f"unknown encoding {name!r}; valid: {', '.join(positional.REGISTRY)}")
    if set(args.sections.split(",")) - set(SECTIONS):
        raise ConfigError(f"--sections={args.sections}: valid sections are {', '.join(SECTIONS)}")
    for key in ("train_blocks", "eval_lengths", "decode_batches"):
        setattr(args, key, bench_common.counts(key, getattr(args, key)))
    if args.budget <= 0 or args.cap < 0:
        raise ConfigError(f"--budget must be > 0 and --cap >= 0, got {args.budget} and {args.cap}")
    return args


def flops_per_token(model, T):
    """Model FLOPs of a training step (forward and backward) per token at sequence length T: 6N + 12 L H Q T, N the
    parameters (the model size: GPT-2's position table left out), L layers, H heads, Q the head size (PaLM: Scaling
    Language Modeling with Pathways, arXiv:2204.02311, Appendix B). An encoding's own work is not counted."""
    cfg = model.config
    return 6 * model.get_num_params() + 12 * cfg.n_layer * cfg.n_head * (cfg.n_embd // cfg.n_head) * T


def peak_flops(args):
    """The card's peak FLOP/s for MFU, or a string saying why there is none."""
    if not args.device.startswith("cuda"):
        return NO_CUDA
    if args.peak_tflops:
        return args.peak_tflops * 1e12
    name = torch.cuda.get_device_name()
    known = [v for k, v in PEAK_TFLOPS.items() if k in name]
    if args.dtype != "bfloat16" or not known:
        return f"unmeasured (no peak known for {name} in {args.dtype}; give --peak_tflops)"
    return known[0] * 1e12


class Recorder:
    """Prints each figure as it is measured and appends it as a JSON line to OUT/device.jsonl."""

    def __init__(self, args, name):
        self.path, self.name = os.path.join(args.out, "device.jsonl"), name

    def __call__(self, section, case, **figures):
        line = dict(encoding=self.name, section=section, case=case, **figures)
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")
        print(f"  {self.name:<16}{section:<8}{case:<14}" + "  ".join(f"{k} {show(k, v)}" for k, v in figures.items()),
              flush=True)


def show(key, value):
    """A figure as the tables print it."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return str(value)
    if key.endswith("bytes"):
        return f"{value / 2 ** 20:.0f} MiB"
    if key == "mfu":
        return f"{100 * value:.1f}%"
    return f"{value:.0f}" if isinstance(value, int) or key.endswith("per_s") else f"{value:.3f}"


def model_for(args, name, block, **overrides):
    """bench.py's model for encoding `name` at training length `block`."""
    return bench_common.build(SimpleNamespace(**{**vars(args), "block_size": block}), name, **overrides)


def measure_train(args, name, record):
    peak = peak_flops(args)
    for block in args.train_blocks:
        model = model_for(args, name, block)
        batch = max(1, args.train_tokens // block)
        x, y = torch.randint(args.vocab_size, (2, batch, block), device=args.device)
        opt = model.configure_optimizers(0.1, 1e-4, (0.9, 0.99), args.device.split(":")[0])

        def step():
            with autocast(args.device, args.dtype):
                loss = model(x, y)[1]
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        step()   # warm-up: AdamW's state, kernels chosen (and compiled where an attention path compiles)
        bench_common.reset_peak(args.device)
        bench_common.sync(args.device)
        t = time.perf_counter()
        for _ in range(args.steps):
            step()
        bench_common.sync(args.device)
        dt = (time.perf_counter() - t) / args.steps
        rate = batch * block / dt
        mfu = rate * flops_per_token(model, block) / peak if isinstance(peak, float) else peak
        record("train", f"block {block}", batch=batch, s_per_step=dt, tokens_per_s=rate, mfu=mfu,
               peak_bytes=bench_common.peak_bytes(args.device))
        del model, opt


def measure_eval(args, name, record):
    for T in args.eval_lengths:
        ns = SimpleNamespace(**{**vars(args), "encodings": name, "compile": False, "block_size": args.train_blocks[0]})
        figures = bench_common.bench_forward(ns, 1, [T], loss=True)[name].get(T)
        if figures is None:
            record("eval", f"{T} tokens", s="n/a (past the encoding's positions)")
        else:
            record("eval", f"{T} tokens", **figures)


@torch.no_grad()
def nanogpt_generate(model, idx, n):
    """nanoGPT's GPT.generate, greedy: each token from a full forward over the text (its last block_size tokens)."""
    block = model.config.block_size
    for _ in range(n):
        logits = model(idx if idx.shape[1] <= block else idx[:, -block:])[0][:, -1]
        idx = torch.cat([idx, sample_next(logits, top_k=1)], 1)
    return idx


def decode_modes(model, cuda):
    """{mode: generate(prompt, n) -> tokens, or the reason it is unmeasured}."""
    def by(decoder):
        return lambda idx, n: decoder.generate(idx, n, top_k=1)
    return {"eager": by(Decoder(model, static=False)), "static": by(Decoder(model)),
            "graph": by(Decoder(model, compile=CUDAGraphStep)) if cuda else NO_CUDA,
            "nanogpt": lambda idx, n: nanogpt_generate(model, idx, n)}


def measure_decode(args, name, record):
    model = model_for(args, name, args.train_blocks[0]).eval()
    n = min(args.gen_tokens, args.train_blocks[0] - args.prompt)
    for B in args.decode_batches:
        prompt = torch.randint(args.vocab_size, (B, args.prompt), device=args.device,
                               generator=torch.Generator(args.device).manual_seed(args.seed))
        figures, outs = {}, {}
        for mode, gen in decode_modes(model, args.device.startswith("cuda")).items():
            if isinstance(gen, str):
                figures[mode] = gen
                continue
            with autocast(args.device, args.dtype):
                gen(prompt, 8)   # warm-up (the graph step captures at its third token)
                bench_common.sync(args.device)
                t = time.perf_counter()
                outs[mode] = gen(prompt, n)
                bench_common.sync(args.device)
            figures[f"{mode}_tokens_per_s"] = B * n / (time.perf_counter() - t)
        for mode, out in outs.items():   # greedy: every mode should draw the static step's tokens
            if mode != "static":
                figures[f"{mode}_same"] = bool(torch.equal(out, outs["static"]))
        if not model.static_decoding:
            figures["note"] = "no static step for this model: static and graph run the reference step"
        record("decode", f"batch {B}", tokens=n, **figures)


def run_one(args, name):
    """This process measures encoding `name`, section by section; an error is recorded and the next section runs."""
    record = Recorder(args, name)
    torch.manual_seed(args.seed)
    for section in args.sections.split(","):
        try:
            {"decode": measure_decode, "train": measure_train, "eval": measure_eval}[section](args, name, record)
        except Exception as e:   # noqa: BLE001  (out of memory, a kernel refused): recorded, the rest goes on
            record(section, "failed", error=f"{type(e).__name__}: {str(e).strip()[:300]}")
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()


def run_capped(argv, name, cap, path):
    """The encoding's subprocess, stopped (its whole process group) after cap seconds."""
    cmd = [sys.executable, os.path.abspath(__file__), *argv, f"--one={name}"]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = proc.wait(timeout=cap)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = f"stopped at the cap ({cap:.0f} s); the figures above it were kept"
    with open(path, "a") as f:
        f.write(json.dumps(dict(encoding=name, section="process", case="", s=time.perf_counter() - t,
                                exit=rc)) + "\n")
    if rc != 0:
        print(f"  {name}: {rc if isinstance(rc, str) else f'exit status {rc}'}", flush=True)


def tables(path):
    """Lines of a table per section, one row per (encoding, case), read back from device.jsonl."""
    rows = [json.loads(line) for line in open(path)]
    lines = []
    for section in SECTIONS:
        mine = [r for r in rows if r.get("section") == section]
        keys = list(dict.fromkeys(k for r in mine for k in r if k not in ("encoding", "section", "case")))
        cells = [[r["encoding"], r["case"]] + [show(k, r[k]) if r.get(k) is not None else "-" for k in keys]
                 for r in mine]
        if not mine:
            continue
        head = ["encoding", "case"] + [k.replace("_tokens_per_s", " tok/s") for k in keys]
        widths = [max(len(str(c[i])) for c in [head] + cells) + 2 for i in range(len(head))]
        lines += [f"\n{section}"] + ["".join(f"{c:<{w}}" for c, w in zip(row, widths)) for row in [head] + cells]
    return lines


def main(argv):
    try:
        args = parse_args(argv)
    except ValueError as e:
        fail(e)
    if args.one:
        return run_one(args, args.one)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "device.jsonl")
    names = args.encodings.split(",")
    cap = args.cap or max(10.0, args.budget / len(names))
    machine = dict(machine=machine_name(args.device), torch=torch.__version__, device=args.device, dtype=args.dtype,
                   cap_s=cap, args={k: v for k, v in vars(args).items() if k != "one"})
    with open(path, "w") as f:
        f.write(json.dumps(machine) + "\n")
    print(f"machine: {machine['machine']}, torch {torch.__version__}, {args.device} {args.dtype}; "
          f"{len(names)} encodings, at most {cap:.0f} s each; {args.n_layer}L {args.n_head}H {args.n_embd}C, "
          f"vocab {args.vocab_size}", flush=True)
    t = time.perf_counter()
    for name in names:
        run_capped([a for a in argv if not a.startswith("--one=")], name, cap, path)
    print("\n".join(tables(path)))
    print(f"\n{time.perf_counter() - t:.0f} s; figures in {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
