"""bench.py's decode section: tokens/s of generation per encoding, at model shapes given as
LxHxC:block, against nanoGPT's generate in the same process and thread count (docs/speed.md).

Every model (random init, seed fixed) generates --gen_tokens tokens from one token, in rounds
that alternate encodings and modes; the median is kept. Modes: `reference` (GPT.forward with
the growing cache), `static` (model.py's static step), `compiled` (that step compiled, outside
the timing) and `nanogpt` (nanoGPT's GPT.generate, imported from the --nanogpt checkout). The
step breakdown times a static eager step at half the length against its matrix products, its
attention over the cached keys and sampling; the rest is host overhead.
"""
import importlib.util
import os
import statistics
import sys
import time

import torch
from torch.nn import functional as F

from model import GPT, Decoder, GPTConfig, sample_next

MODES = ("reference", "static", "compiled")
TEMPERATURE, TOP_K = 0.8, 200


def parse_shapes(text):
    """'4x4x128:64,6x6x384:256' -> [(n_layer, n_head, n_embd, block_size)]; ValueError if malformed."""
    shapes = []
    for item in text.split(","):
        try:
            dims, block = item.strip().split(":")
            L, H, C = (int(d) for d in dims.split("x"))
            shapes.append((L, H, C, int(block)))
        except ValueError:
            raise ValueError(f"decode shape {item!r} is not LxHxC:block (e.g. 4x4x128:64)") from None
    return shapes


def load_nanogpt(folder):
    """nanoGPT's model module, imported from folder/model.py; ValueError with a sentence if absent."""
    path = os.path.join(folder, "model.py")
    if not os.path.isfile(path):
        raise ValueError(f"--nanogpt={folder}: no model.py there; give the folder of a nanoGPT checkout")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runners(args, shape, nanogpt):
    """{(encoding, mode): generate(n) -> tokens} for one shape, with the models built once."""
    L, H, C, block = shape
    out = {}
    for name in args.decode_encodings.split(","):
        torch.manual_seed(args.seed)
        model = GPT(GPTConfig(n_layer=L, n_head=H, n_embd=C, block_size=block, vocab_size=args.decode_vocab,
                              pos_encoding=name, dropout=0.0, bias=False, window=args.decode_window)).to(args.device)
        model.eval()
        for mode in MODES:
            if mode == "compiled" and (not model.static_decoding or not args.decode_compile):
                continue
            d = Decoder(model, static=mode != "reference", compile=mode == "compiled")
            out[name, mode] = run = lambda n, d=d: d.generate(start(args), n, TEMPERATURE, TOP_K, seeded(args))
            run.decoder = d
    if nanogpt is not None:
        torch.manual_seed(args.seed)
        ng = nanogpt.GPT(nanogpt.GPTConfig(n_layer=L, n_head=H, n_embd=C, block_size=block,
                                           vocab_size=args.decode_vocab, dropout=0.0, bias=False)).to(args.device)
        ng.eval()
        out["nanoGPT", "nanogpt"] = lambda n: torch.no_grad()(ng.generate)(start(args), n, TEMPERATURE, TOP_K)
    return out


def start(args):
    return torch.zeros(1, 1, dtype=torch.long, device=args.device)


def seeded(args):
    return torch.Generator(device=args.device).manual_seed(args.seed)


def warm_up(d, n_positions, steps=3):
    """Run a few steps of Decoder d at the cache shape of a generation of n_positions: compiles its step."""
    tok = torch.zeros(1, 1, dtype=torch.long, device=d.model.wte.weight.device)
    limit = d.model.max_positions           # the cache a generation opens: no more than the encoding knows
    d.open(1, n_positions if limit is None else min(n_positions, limit), tok.device)
    d.prefill(tok)
    for _ in range(steps):
        d.next(tok)
    d.close()


def time_rounds(args, runs):
    """({key: (median wall s, median CPU s)}, {key: tokens}) of generating args.gen_tokens, interleaved."""
    for key, fn in runs.items():   # warm-up; the compiled steps are compiled at their real shapes
        if key[1] == "compiled":
            warm_up(fn.decoder, 1 + args.gen_tokens)
        else:
            fn(4)
    wall, cpu, tokens = {k: [] for k in runs}, {k: [] for k in runs}, {}
    for _ in range(args.rounds):
        for key, fn in runs.items():
            torch.manual_seed(args.seed)   # nanoGPT samples from the global generator
            t, c = time.perf_counter(), time.process_time()
            tokens[key] = fn(args.gen_tokens)
            wall[key].append(time.perf_counter() - t)
            cpu[key].append(time.process_time() - c)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in runs}, tokens


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
def breakdown(args, shape, name="alibi"):
    """Microseconds of a static eager step at half the length, and of its parts (module docstring)."""
    L, H, C, block = shape
    torch.manual_seed(args.seed)
    model = GPT(GPTConfig(n_layer=L, n_head=H, n_embd=C, block_size=block, vocab_size=args.decode_vocab,
                          pos_encoding=name, bias=False)).to(args.device).eval()
    n, D = args.gen_tokens // 2, C // H
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
    sampling = best_of(lambda: sample_next(logits, TEMPERATURE, TOP_K, seeded(args)))
    us = 1e6
    return dict(encoding=name, step_us=step * us, matmul_us=matmul * us, attention_us=attn * us,
                sampling_us=sampling * us, other_us=(step - matmul - attn) * us, keys=n)


def bench_decode(args, nanogpt):
    """{"<shape> <n>t": {"rows": {encoding: {mode: {...}}}, "breakdown": [...]}} per shape and thread count."""
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)  # a graph per model
    before, out = torch.get_num_threads(), {}
    try:
        for threads in (int(t) for t in args.decode_threads.split(",")):
            torch.set_num_threads(threads)
            for shape in parse_shapes(args.decode_shapes):
                label = "{}x{}x{}:{} {}t".format(*shape, threads)
                out[label] = bench_shape(args, shape, nanogpt)
                print("\n".join(table({label: out[label]}, args)), file=sys.stderr, flush=True)   # progress
    finally:
        torch.set_num_threads(before)
    return out


def bench_shape(args, shape, nanogpt):
    times, tokens = time_rounds(args, runners(args, shape, nanogpt))
    rows = {}
    for (name, mode), (wall, cpu) in times.items():
        same = torch.equal(tokens[name, mode], tokens[name, "reference"]) if (name, "reference") in tokens else None
        rows.setdefault(name, {})[mode] = dict(tokens_per_s=args.gen_tokens / wall, cpu_tokens_per_s=args.gen_tokens / cpu,
                                               same_tokens=same)
    return dict(rows=rows, breakdown=[breakdown(args, shape, e) for e in ("alibi", "rope")])


def table(results, args):
    """Lines of the decode tables (bench.py prints them)."""
    lines = []
    for label, r in results.items():
        shape, threads = label.split(" ")
        ng = r["rows"].get("nanoGPT", {}).get("nanogpt")
        seen = f"window {args.decode_window}" if args.decode_window else "the whole text"
        lines.append(f"\ndecode {shape} (LxHxC:block), vocab {args.decode_vocab}, {args.gen_tokens} tokens from one, "
                     f"{threads[:-1]} thread(s), attending to {seen}, median of {args.rounds} rounds: tokens/s (wall)")
        lines.append(f"{'encoding':<16}" + "".join(f"{m:>11}" for m in MODES) + f"{'best/nanoGPT':>14}  same tokens")
        for name, modes in r["rows"].items():
            if name == "nanoGPT":
                continue
            cells = "".join(f"{modes[m]['tokens_per_s']:11.0f}" if m in modes else f"{'-':>11}" for m in MODES)
            best = max(v["tokens_per_s"] for m, v in modes.items() if m != "reference")
            vs = f"{best / ng['tokens_per_s']:13.1f}x" if ng else f"{'-':>14}"
            same = all(v["same_tokens"] for m, v in modes.items() if m != "reference")
            lines.append(f"{name:<16}{cells}{vs}  {'yes' if same else 'NO'}")
        lines.append(f"{'nanoGPT':<16}{ng['tokens_per_s']:11.0f}  (its generate: the cropped context re-run per token)"
                     if ng else "nanoGPT: left out (give --nanogpt=/path/to/nanoGPT, a checkout's folder)")
        rope, alibi = r["rows"].get("rope"), r["rows"].get("alibi")
        if rope and alibi:
            ratios = ", ".join(f"{m} {alibi[m]['tokens_per_s'] / rope[m]['tokens_per_s']:.2f}"
                               for m in MODES if m in rope and m in alibi)
            lines.append(f"rope / alibi time per token: {ratios}")
        lines.append("step breakdown, static eager step at half the length (us): "
                     "step = matmul + attention + other; sampling is separate")
        for b in r["breakdown"]:
            lines.append(f"  {b['encoding']:<8} step {b['step_us']:7.0f}  matmul {b['matmul_us']:6.0f}  attention "
                         f"({b['keys']} keys) {b['attention_us']:6.0f}  other {b['other_us']:6.0f}  "
                         f"sampling {b['sampling_us']:5.0f}")
    return lines
