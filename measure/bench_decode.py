"""bench.py's decode section: tokens/s generating --gen_tokens tokens from one, per encoding and
LxHxC:block shape (random init, seed fixed), in rounds alternating encodings and modes (the median
is kept): `reference` (GPT.forward with the growing cache), `static` (generate.py's static step),
`compiled` (that step compiled, outside the timing), `aot` (compiled ahead of time, training/aot.py)
and `nanogpt` (nanoGPT's GPT.generate from the --nanogpt checkout, same process and threads). The
step breakdown times a static eager step at half the length against its matrix products, its
attention over the cached keys and sampling; the rest is host overhead (docs/speed.md).
"""
import importlib.util
import os
import re
import statistics
import time

import torch
from torch.nn import functional as F

from generate import Decoder, sample_next
from model import GPT, GPTConfig
from training.aot import AheadOfTime

MODES = ("reference", "static", "compiled", "aot")
TEMPERATURE, TOP_K = 0.8, 200


def machine_name(device):
    """The processor (Linux: /proc/cpuinfo's model name) and core count, or the CUDA card: printed above every table."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = "unknown CPU"
    return f"{cpu}, {os.cpu_count()} cores"


def parse_shapes(text):
    """'4x4x128:64,6x6x384:256' -> [(n_layer, n_head, n_embd, block_size)]; ValueError if malformed."""
    found = [re.fullmatch(r"(\d+)x(\d+)x(\d+):(\d+)", item.strip()) for item in text.split(",")]
    if not all(found):
        raise ValueError(f"--decode_shapes={text}: a shape there is not LxHxC:block (e.g. 4x4x128:64)")
    return [tuple(int(g) for g in m.groups()) for m in found]


def load_nanogpt(folder):
    """nanoGPT's model module, imported from folder/model.py; ValueError with a sentence if absent."""
    path = os.path.join(folder, "model.py")
    if not os.path.isfile(path):
        raise ValueError(f"--nanogpt={folder}: no model.py there; give the folder of a nanoGPT checkout")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(args, shape, name, vocab, **overrides):
    """A GPT of shape (L, H, C, block) with encoding `name`, seeded (bench.py's sections too)."""
    L, H, C, block = shape
    torch.manual_seed(args.seed)
    cfg = GPTConfig(n_layer=L, n_head=H, n_embd=C, block_size=block, vocab_size=vocab,
                    pos_encoding=name, dropout=0.0, bias=False, **overrides)
    return GPT(cfg).to(args.device)


def runners(args, shape, nanogpt):
    """{(encoding, mode): generate(n) -> tokens} for one shape, with the models built once."""
    out = {}
    start = torch.zeros(1, 1, dtype=torch.long, device=args.device)
    seeded = lambda: torch.Generator(args.device).manual_seed(args.seed)  # noqa: E731
    for name in args.decode_encodings.split(","):
        model = build(args, shape, name, args.decode_vocab, window=args.decode_window).eval()
        for mode in MODES[:2 + 2 * (model.static_decoding and args.decode_compile)]:
            compile_as = {"compiled": True, "aot": AheadOfTime}.get(mode, False)
            d = Decoder(model, static=mode != "reference", compile=compile_as)
            out[name, mode] = lambda n, d=d: d.generate(start, n, TEMPERATURE, TOP_K, seeded())
    if nanogpt is not None:
        L, H, C, block = shape
        torch.manual_seed(args.seed)
        ng = nanogpt.GPT(nanogpt.GPTConfig(n_layer=L, n_head=H, n_embd=C, block_size=block,
                                           vocab_size=args.decode_vocab, dropout=0.0, bias=False)).to(args.device)
        out["nanoGPT", "nanogpt"] = lambda n: torch.no_grad()(ng.eval().generate)(start, n, TEMPERATURE, TOP_K)
    return out


def time_rounds(args, runs):
    """({key: median wall seconds}, {key: tokens}) of generating args.gen_tokens, interleaved."""
    for (_, mode), fn in runs.items():   # warm-up; the compiled steps are compiled at their real shapes
        fn(args.gen_tokens if mode in ("compiled", "aot") else 4)
    times, tokens = {k: [] for k in runs}, {}
    for _ in range(args.rounds):
        for key, fn in runs.items():
            torch.manual_seed(args.seed)   # nanoGPT samples from the global generator
            t = time.perf_counter()
            tokens[key] = fn(args.gen_tokens)
            times[key].append(time.perf_counter() - t)
    return {k: statistics.median(times[k]) for k in runs}, tokens


def best_of(fn, reps=200, rounds=5):
    """Median over rounds of the mean seconds per call of fn()."""
    fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        times.append((time.perf_counter() - t) / reps)
    return statistics.median(times)


@torch.no_grad()
def breakdown(args, shape, name):
    """Microseconds of a static eager step at half the length, and of its parts (module docstring)."""
    L, H, C, _ = shape
    model, n, D = build(args, shape, name, args.decode_vocab).eval(), args.gen_tokens // 2, C // H
    d = Decoder(model)
    d.open(1, args.gen_tokens + 1, torch.device(args.device))
    d.prefill(torch.zeros(1, n, dtype=torch.long, device=args.device))
    tok = torch.zeros(1, 1, dtype=torch.long, device=args.device)
    step = best_of(lambda: d.step(model, tok, d.pos, d.cache, n + 1))   # the same position each time, its key too
    d.close()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = [torch.randn(1, 1, m.in_features, device=args.device) for m in linears]
    matmul = sum(best_of(lambda m=m, x=x: F.linear(x, m.weight)) for m, x in zip(linears, inputs))
    q, k = torch.randn(1, H, 1, D, device=args.device), torch.randn(1, H, n, D, device=args.device)
    mask = torch.ones(1, 1, 1, n, dtype=torch.bool, device=args.device)
    attn = L * best_of(lambda: F.scaled_dot_product_attention(q, k, k, attn_mask=mask))
    logits = torch.randn(1, args.decode_vocab, device=args.device)
    gen = torch.Generator(args.device).manual_seed(args.seed)
    sampling = best_of(lambda: sample_next(logits, TEMPERATURE, TOP_K, gen))
    return dict(encoding=name, step_us=step * 1e6, matmul_us=matmul * 1e6, attention_us=attn * 1e6,
                sampling_us=sampling * 1e6, other_us=(step - matmul - attn) * 1e6, keys=n)


def bench_decode(args, nanogpt):
    """{"<shape> <n>t": {"rows": {encoding: {mode: {...}}}, "breakdown": [...]}} per shape and thread count."""
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)  # a graph per model
    before, out = torch.get_num_threads(), {}
    try:
        for threads in (int(t) for t in args.decode_threads.split(",")):
            torch.set_num_threads(threads)
            for shape in parse_shapes(args.decode_shapes):
                times, tokens = time_rounds(args, runners(args, shape, nanogpt))
                rows = {}
                for (name, mode), wall in times.items():
                    same = torch.equal(tokens[name, mode], tokens[name, "reference"]) if mode != "nanogpt" else None
                    rows.setdefault(name, {})[mode] = dict(tokens_per_s=args.gen_tokens / wall, same_tokens=same)
                out["{}x{}x{}:{} {}t".format(*shape, threads)] = dict(
                    rows=rows, breakdown=[breakdown(args, shape, e) for e in ("alibi", "rope")])
    finally:
        torch.set_num_threads(before)
    return out


def table(results, args):
    """Lines of the decode tables (bench.py prints them)."""
    lines, columns = [], (*MODES, "nanogpt")
    seen = f"window {args.decode_window}" if args.decode_window else "the whole text"
    for label, r in results.items():
        shape, threads = label.split()
        ng = r["rows"].get("nanoGPT", {}).get("nanogpt", {}).get("tokens_per_s")
        lines += [f"\ndecode {shape} (LxHxC:block), {threads[:-1]} thread(s), vocab {args.decode_vocab}, "
                  f"{args.gen_tokens} tokens from one, attending to {seen}, median of {args.rounds} rounds: tokens/s",
                  f"{'encoding':<16}" + "".join(f"{m:>11}" for m in columns) + f"{'best/nanoGPT':>14}  same tokens"]
        for name, modes in r["rows"].items():
            tok = {m: v["tokens_per_s"] for m, v in modes.items()}
            best = max(v for m, v in tok.items() if m != "reference")
            same = {v["same_tokens"] for v in modes.values()} - {None}
            same = "NO" if False in same else "yes" if same else "-"
            lines.append(f"{name:<16}" + "".join(f"{tok[m]:11.0f}" if m in tok else f"{'-':>11}" for m in columns)
                         + (f"{best / ng:13.1f}x" if ng else f"{'-':>14}") + f"  {same}")
        if not ng:
            lines.append("nanoGPT: left out (give --nanogpt=/path/to/nanoGPT, a checkout's folder)")
        lines.append("step breakdown, static eager step at half the length (us): "
                     "step = matmul + attention + other; sampling is separate")
        for b in r["breakdown"]:
            lines.append(f"  {b['encoding']:<8} step {b['step_us']:7.0f}  matmul {b['matmul_us']:6.0f}  "
                         f"attention ({b['keys']} keys) {b['attention_us']:6.0f}  other {b['other_us']:6.0f}  "
                         f"sampling {b['sampling_us']:5.0f}")
    return lines
