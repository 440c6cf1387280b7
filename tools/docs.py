"""The generated blocks of the docs: a page's `<!-- generated from SOURCE... -->` ... `<!-- end -->` holds what
its generator (GENERATORS, by the sources' path) makes of SOURCE, a report's or a benchmark's files, so that no
number on a docs page drifts from its CSV or JSON (tests/test_docs.py checks that every block equals it).

After a new report or benchmark, rewrite every block from its source:

    python -m tools.docs
"""
import csv
import glob
import json
import os
import re
import statistics
import sys

import positional
from model import GPT, GPTConfig
from tasks.report import bin_label

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]
PAGES = DOCS + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "benchmarks", "*.md")))
BLOCK = re.compile(r"<!-- generated from (?P<src>[^>]+?) -->\n(?P<body>.*?)<!-- end -->", re.S)
REFERENCE = "rope"   # the encoding the long-context and memory tables divide by


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def mean_std(values, digits=2):
    """Mean ± sample std over seeds to `digits` decimals; one seed: its value alone."""
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def ppl_table(runs_csv, every_label=False):
    """Per encoding as trained (label == encoding) and n-gram baseline: ppl at each length, mean ± std over seeds;
    every_label: each RoPE method's and fine-tune's row too ("rope+yarn", "rope+yarn ft100")."""
    rows = list(csv.DictReader(open(runs_csv)))
    lengths = [c for c in rows[0] if c.startswith("ppl@")]
    lines = ["| encoding | seeds | " + " | ".join(lengths) + " |", "|---" * (len(lengths) + 2) + "|"]
    shown = [r["label"] for r in rows if every_label or r["label"] == r["encoding"] or r["encoding"] == "ngram"]
    for enc in dict.fromkeys(shown):
        runs = [r for r in rows if r["label"] == enc]
        cells = [mean_std([float(r[c]) for r in runs]) if all(r[c] not in ("", "nan") for r in runs) else "—"
                 for c in lengths]
        lines.append(f"| {enc} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def label_table(runs_csv):
    """ppl_table with every label of the report: the encodings as trained, each RoPE method, each fine-tune."""
    return ppl_table(runs_csv, every_label=True)


def protocol_table(runs_csv):
    """ppl_table, then each encoding as trained by its perplexity at the longest length (lowest first), that
    perplexity over its own at the shortest length (the training length: how much it rises at the longest) and its
    training wall time (mean over seeds)."""
    rows = [r for r in csv.DictReader(open(runs_csv)) if r["label"] == r["encoding"]]
    lengths = [c for c in rows[0] if c.startswith("ppl@")]
    first, last = lengths[0], lengths[-1]
    means = {}
    for enc in dict.fromkeys(r["label"] for r in rows):
        runs = [r for r in rows if r["label"] == enc]
        means[enc] = [statistics.mean(float(r[c]) for r in runs) for c in (first, last, "wall_s")]
    order = sorted((e for e in means if means[e][1] == means[e][1]), key=lambda e: means[e][1])
    cells = [f"{e} {means[e][1]:.2f} ({means[e][1] / means[e][0]:.2f}x its {first}; trained in "
             f"{means[e][2] / 60:.0f} min)" for e in order]
    return ppl_table(runs_csv) + f"\nBy {last}, lowest first (each over its own {first}): " + ", ".join(cells) + ".\n"


HOLDS = 1.1   # a learned row "holds" past L when its perplexity at 16L is below HOLDS x its perplexity at L


def registry_table(runs_csv, *_):
    """The whole-registry comparison (issue #50): per encoding as trained, grouped by family, its perplexity at L,
    4L and 16L (mean ± sd over seeds), whether it beats the count 4-gram at L, and the retrieval probe beside it
    (the in-range gain and its verdict, the gain at 2L, t over seeds); then generated sentences on what the rows
    can say."""
    from measure import panels, retrieval_probe
    rows = list(csv.DictReader(open(runs_csv)))
    lengths = [c for c in rows[0] if c.startswith("ppl@")]
    L = int(lengths[0][4:])
    at = {m: f"ppl@{m * L}" for m in (1, 4, 16) if f"ppl@{m * L}" in rows[0]}
    four = next((float(r[at[1]]) for r in rows if r["label"] == "4-gram"), float("nan"))
    probes = retrieval_probe.read(os.path.dirname(runs_csv))
    trained = list(dict.fromkeys(r["label"] for r in rows if r["label"] == r["encoding"]))
    lines = ["| family | encoding | seeds | " + " | ".join(at.values()) + " | past the 4-gram at L | probe in L, "
             "nats/token [95%] | probe at 2L [95%] | wall per run |", "|---" * (len(at) + 7) + "|"]
    notes = dict(beats=[], void=[], retrieves=[], holds=[], breaks=[], short=[])
    for fam in panels.FAMILIES:
        for enc in [e for e in trained if panels.family(e) == fam]:
            runs = [r for r in rows if r["label"] == enc]
            ppl = {m: [float(r[c]) for r in runs] for m, c in at.items()}
            cells = [mean_std(v) if all(x == x for x in v) else "—" for v in ppl.values()]
            learned = statistics.mean(ppl[1]) < four
            probe, past = probe_cells(probes.get(enc), L, notes, enc)
            ratio = statistics.mean(ppl[16]) / statistics.mean(ppl[1]) if 16 in ppl else float("nan")
            if learned:
                notes["beats"].append(enc)
                notes["holds" if ratio < HOLDS else "breaks" if ratio >= HOLDS else "short"].append(enc)
            wall = statistics.mean(float(r["wall_s"]) for r in runs) / 60
            beats = "yes" if learned else "no †"
            lines.append(f"| {fam} | {enc} | {len(runs)} | " + " | ".join(cells) + f" | {beats} | {probe} | {past} | "
                         f"{wall:.0f} min |")
    return "\n".join(lines + ["", *registry_sentences(notes, trained, four, L)]) + "\n"


def probe_cells(runs, L, notes, enc):
    """(in-range cell, 2L cell) of an encoding's probe rows by seed, and its verdict into notes; "—" without."""
    from measure import retrieval_probe
    if not runs:
        return "not measured", "—"
    runs = [rows for _, rows in sorted(runs.items())]
    is_void, (mean, lo, hi) = retrieval_probe.void(runs)
    notes["void" if is_void else "retrieves"].append(enc)
    cell = "—" if mean != mean else f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}] " + ("void" if is_void else "retrieves")
    two = next((s for s in retrieval_probe.summarize(runs, L) if s["distance"] == 2 * L), None)
    if two is None or two["gain"] != two["gain"]:
        return cell, "—"
    return cell, f"{two['gain']:+.3f} [{two['lo']:+.3f}, {two['hi']:+.3f}]"


def registry_sentences(notes, trained, four, L):
    """What the whole-registry table can say, in sentences made from its verdicts."""
    from measure.retrieval_probe import CLEAR
    names = lambda xs: ", ".join(f"`{x}`" for x in xs) or "none"   # noqa: E731
    lost = [e for e in trained if e not in notes["beats"]]
    out = [f"Of the {len(trained)} rows kept so far, {len(notes['beats'])} beat the 4-gram at L "
           f"(perplexity {four:.2f}); not learned (†): {names(lost)}."]
    if notes["retrieves"]:
        out.append(f"The probe finds retrieval inside L for {names(notes['retrieves'])}: for these, the gain past L "
                   f"says whether the context past L is used.")
    out.append(f"The probe is void (no clear retrieval inside L: under {CLEAR} nats a token) for "
               f"{names(notes['void'])}: for these rows the table says whether an encoding *breaks* past L, not "
               f"whether it *uses* the context there.")
    out.append(f"Of the learned rows, perplexity at 16L stays within {HOLDS - 1:.0%} of that at L for "
               f"{names(notes['holds'])}; it rises further for {names(notes['breaks'])}"
               + (f"; {names(notes['short'])} cannot run there (positions up to L only)." if notes["short"] else "."))
    return out


def mastery_table(task_runs_csv, threshold=0.95):
    """Per task and encoding: runs reaching `threshold` exact match at the training length."""
    rows = list(csv.DictReader(open(task_runs_csv)))
    lines = [f"| task | encoding | runs with exact match ≥ {threshold:.0%} at L |", "|---|---|---|"]
    for task in dict.fromkeys(r["task"] for r in rows):
        for enc in dict.fromkeys(r["encoding"] for r in rows if r["task"] == task):
            mine = [r for r in rows if r["task"] == task and r["encoding"] == enc]
            at_l = [r for r in mine if int(r["length"]) == min(int(x["length"]) for x in mine)]
            lines.append(f"| {task} | {enc} | {sum(float(r['exact']) >= threshold for r in at_l)} of {len(at_l)} |")
    return "\n".join(lines) + "\n"


def exact_table(task_runs_csv, threshold=0.95):
    """A task comparison's runs.csv (one task): per encoding, its seeds, how many learned it (exact match at L, the
    shortest length, >= threshold) and its exact match at each scored length, mean ± sd over seeds in %; — where a
    position table does not reach the length."""
    rows = list(csv.DictReader(open(task_runs_csv)))
    lengths = sorted({int(r["length"]) for r in rows})
    lines = ["| encoding | seeds | learned at L | " + " | ".join(f"exact @{n}" for n in lengths) + " |",
             "|---" * (len(lengths) + 3) + "|"]
    for enc in dict.fromkeys(r["encoding"] for r in rows):
        mine = [r for r in rows if r["encoding"] == enc]
        seeds = sorted({r["seed"] for r in mine})
        at = {n: [r["exact"] for r in mine if int(r["length"]) == n] for n in lengths}
        learned = sum(float(x) >= threshold for x in at[lengths[0]])
        cells = [mean_std([100 * float(x) for x in v], digits=1) if all(v) else "—" for v in at.values()]
        lines.append(f"| {enc} | {len(seeds)} | {learned} of {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def distance_table(distance_csv):
    """A task suite's distance.csv (tasks/report.py): per task and encoding, exact match (%) in each bin of
    key-query distance, every scored length pooled, over the runs learned at L (mean ± sd over them; "learned"
    counts them against the runs scored); — where no answer of a learned run fell in the bin."""
    rows = list(csv.DictReader(open(distance_csv)))
    bins = list(dict.fromkeys((float(r["lo"]), float(r["hi"])) for r in rows))
    head = " | ".join(bin_label(lo, hi) for lo, hi in bins)
    lines = [f"| task | encoding | learned | {head} |", "|---" * (len(bins) + 3) + "|"]
    for task, enc in dict.fromkeys((r["task"], r["encoding"]) for r in rows):
        mine = [r for r in rows if (r["task"], r["encoding"]) == (task, enc)]
        seeds = list(dict.fromkeys(r["seed"] for r in mine))
        learned = list(dict.fromkeys(r["seed"] for r in mine if learned_at_l(r)))
        cells = []
        for lo, hi in bins:
            per_run = []
            for seed in learned:
                cell = [r for r in mine if r["seed"] == seed and (float(r["lo"]), float(r["hi"])) == (lo, hi)]
                answers = sum(int(r["answers"]) for r in cell)
                if answers:
                    per_run.append(100 * sum(int(r["right"]) for r in cell) / answers)
            cells.append(mean_std(per_run, digits=1) if per_run else "—")
        lines.append(f"| {task} | {enc} | {len(learned)} of {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def learned_at_l(row):
    """A distance.csv row's `learned` cell, which csv writes as "True" or "False", as a bool."""
    cell = row["learned"]
    return cell == "True"


def recipe_trials_table(trials_csv):
    """reports/tasks-recipes/trials.csv: one recipe trial a row, its exact match at L and whether it learned."""
    rows = list(csv.DictReader(open(trials_csv)))
    lines = ["| task | encoding | seed | iterations | learning rate | other keys | exact match at L "
             "| learned (≥ 95%) | train s |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| `{r['task']}` | {r['encoding']} | {r['seed']} | {int(r['max_iters'])} | "
              f"{float(r['learning_rate']):g} | {r.get('other') or '—'} | {float(r['exact_at_L']):.1%} | "
              f"{'yes' if float(r['exact_at_L']) >= 0.95 else 'no'} | {r['train_s']} |" for r in rows]
    return "\n".join(lines) + "\n"


def train_step_table(*bench_jsons):
    """bench.py --sections=train JSONs: ms per step and the ratio to `none`, one column pair each."""
    runs = [json.load(open(p)) for p in bench_jsons]
    head = [f"block {r['args']['block_size']}, batch {r['args']['batch_size']}" for r in runs]
    lines = ["| encoding | " + " | ".join(f"ms/step ({h}) | vs none" for h in head) + " |",
             "|---" * (2 * len(runs) + 1) + "|"]
    for enc in runs[0]["train"]:
        cells = [f"{r['train'][enc]['ms']:.1f} | {r['train'][enc]['ratio_to_none']:.2f}" for r in runs]
        lines.append(f"| {enc} | " + " | ".join(cells) + " |")
    a, m = runs[0]["args"], runs[0]["machine"]
    lines.append(f"\ntorch {m['torch']}, {m['cpus']} CPUs, {a['threads']} thread(s), {a['n_layer']} layers x "
                 f"{a['n_head']} heads x {a['n_embd']}, median of {a['rounds']} rounds x {a['steps']} step(s).")
    return "\n".join(lines) + "\n"


def long_table(folder):
    """A folder of bench.py --sections=long JSONs (one encoding each, any lengths): seconds and process peak
    against the reference's at the same length (time: against the reference run just before it, rope_s, where the
    JSON has one), whether issue #22's bounds hold (memory within 2x, time within 3x), and which rows are past them."""
    runs = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(folder, "*.json")))]
    rows = sorted(((int(T), e, r, c) for r in runs for e, by_T in r["long"].items() for T, c in by_T.items()),
                  key=lambda x: x[:2])
    ref = {T: c for T, e, _, c in rows if e == REFERENCE}
    machines = sorted({r["machine"].get("name", "unnamed machine") for r in runs})   # > 1: a column names each row's
    lines = ["| encoding | tokens | seconds | vs rope | process peak MiB | vs rope | within 2x / 3x |"
             + " machine |" * (len(machines) > 1), "|---" * (7 + (len(machines) > 1)) + "|"]
    past_memory, past_time = set(), set()
    for T, e, r, c in rows:
        t, m = c["s"] / c.get("rope_s", ref[T]["s"]), c["peak_bytes"] / ref[T]["peak_bytes"]   # rope_s: just before
        lines.append(f"| {e} | {T:,} | {c['s']:.1f} | {t:.2f} | {c['peak_bytes'] / 2 ** 20:.0f} | {m:.2f} | "
                     f"{'yes' if m <= 2 else 'no'} / {'yes' if t <= 3 else 'no'} |"
                     + f" {short_machine(r['machine'])} |" * (len(machines) > 1))
        past_memory |= {e} if m > 2 else set()
        past_time |= {e} if t > 3 else set()
    m = runs[0]["machine"]
    lines.append(f"\n{' and '.join(machines)}, torch {m['torch']}, {m['threads']} thread(s), one process per "
                 f"encoding, 4 layers x 4 heads x 128, one sequence"
                 + (" (time against a RoPE run on the same machine just before)." if len(machines) > 1 else "."))
    past = [f"{what}: {', '.join(sorted(names))}" for what, names in
            (("memory past 2x RoPE's", past_memory), ("time past 3x RoPE's", past_time)) if names]
    lines.append("Past a bound: " + "; ".join(past) + "." if past else "Every row within both bounds.")
    short = sorted(e for r in runs for e, by_T in r["long"].items() if not by_T)
    if short:
        lines.append(f"No row for {', '.join(short)}: fewer positions than this (max_positions; learned is not run).")
    return "\n".join(lines) + "\n"


def short_machine(machine):
    """"AMD EPYC" of "AMD EPYC, 2 cores"; "Intel Xeon" of "Intel(R) Xeon(R) Processor, 2 cores"."""
    return machine.get("name", "unnamed").split(",")[0].replace("(R)", "").replace(" Processor", "")


def train_memory_table(*bench_jsons):
    """bench.py --sections=train_memory JSONs: one training step's process peak per encoding, against rope's."""
    runs = [json.load(open(p)) for p in bench_jsons]
    head = [f"block {r['args']['block_size']}, batch {r['args']['batch_size']}" for r in runs]
    lines = ["| encoding | " + " | ".join(f"peak MiB ({h}) | vs rope" for h in head) + " |",
             "|---" * (2 * len(runs) + 1) + "|"]
    for enc in runs[0]["train_memory"]:
        peaks = [(r["train_memory"][enc]["peak_bytes"], r["train_memory"][REFERENCE]["peak_bytes"]) for r in runs]
        cells = [f"{peak / 2 ** 20:.0f} | {peak / ref:.2f}" for peak, ref in peaks]
        lines.append(f"| {enc} | " + " | ".join(cells) + " |")
    m = runs[0]["machine"]
    lines.append(f"\n{m.get('name', 'unnamed machine')}, torch {m['torch']}, {m['threads']} thread(s), 4 layers x "
                 f"4 heads x 128; the process peak includes torch itself (about 400 MiB).")
    return "\n".join(lines) + "\n"


def train_memory_lengths(folder):
    """A folder of bench.py --sections=train,train_memory JSONs named RUN_L<tokens>.json (RUN: before, after...), each
    with the reference and other encodings: per run and length, each encoding's process peak and median step (wall
    and CPU time) against the reference's in the same process."""
    runs = []
    for path in sorted(glob.glob(os.path.join(folder, "*_L*.json"))):
        label, _, length = os.path.basename(path)[:-len(".json")].rpartition("_L")
        runs.append((label, int(length), json.load(open(path))))
    others = [e for e in runs[0][2]["train_memory"] if e != REFERENCE]
    head = "".join(f" {e} MiB | vs {REFERENCE} | {e} ms | vs {REFERENCE} | CPU vs {REFERENCE} |" for e in others)
    lines = [f"| run | tokens | {REFERENCE} MiB | {REFERENCE} ms |" + head, "|---" * (4 + 5 * len(others)) + "|"]
    for label, T, r in sorted(runs, key=lambda x: (x[0] != "before", x[0], x[1])):
        m, t = r["train_memory"], r["train"]
        ref, ref_t = m[REFERENCE], t[REFERENCE]
        cells = "".join(f" {m[e]['peak_bytes'] / 2 ** 20:.0f} | {m[e]['peak_bytes'] / ref['peak_bytes']:.2f} | "
                        f"{t[e]['ms']:.0f} | {t[e]['ms'] / ref_t['ms']:.2f} | {t[e]['cpu_ms'] / ref_t['cpu_ms']:.2f} |"
                        for e in others)
        lines.append(f"| {label} | {T:,} | {ref['peak_bytes'] / 2 ** 20:.0f} | {ref_t['ms']:.0f} |" + cells)
    a, m = runs[0][2]["args"], runs[0][2]["machine"]
    lines.append(f"\n{m.get('name', 'unnamed machine')}, torch {m['torch']}, {m['threads']} thread(s), {a['n_layer']} "
                 f"layers x {a['n_head']} heads x {a['n_embd']}, batch {a['batch_size']}; the step's median of "
                 f"{a['rounds']} rounds (wall, and CPU time beside it), then one step's process peak after a warm-up "
                 f"step (torch itself included, about 400 MiB).")
    return "\n".join(lines) + "\n"


def gpu_table(folder):
    """benchmarks/gpu.sh's figures on a GPU (run1/, run2/ in order: a later row of an encoding and window replaces an
    earlier one): benchmarks/gpu_check.py's rows, and bench.py's training step peak at block 1024 per encoding."""
    checks, memory, names = {}, {}, set()
    for run in sorted(glob.glob(os.path.join(folder, "run*"))):
        for path in sorted(glob.glob(os.path.join(run, "*.json"))):
            r = json.load(open(path))
            for row in r.get("rows", []):
                checks[row["encoding"], row["window"]] = row
            memory.update(r.get("train_memory", {}))
            names.add(f"{r['machine']['name']}, torch {r['machine']['torch']}" if "machine" in r
                      else f"{r['device']}, torch {r['torch']}")
    lines = ["| encoding | window | kernels (evaluation; training) | logits, rel. | gradients, rel. | static decode = "
             "forward | training step peak MiB | vs rope |", "|---" * 8 + "|"]
    order = list(positional.REGISTRY)
    for (enc, window), c in sorted(checks.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
        mem = memory.get(enc) if window == 0 else None
        kernels = "; ".join(",".join(c.get(k, [])) for k in ("eval_kernels", "train_kernels"))
        cells = ([f"failed: {c['error'][:60]}", "", "", ""] if "error" in c else
                 [kernels, f"{c['eval_logits_rel']:.1e}", f"{c['train_grad_rel']:.1e}",
                  "yes" if c["decode_static_eq_forward"] else "no"])
        ref = memory[REFERENCE]["peak_bytes"] if mem else None
        cells += [f"{mem['peak_bytes'] / 2 ** 20:.0f}", f"{mem['peak_bytes'] / ref:.2f}"] if mem else ["", ""]
        lines.append(f"| {enc} | {window} | " + " | ".join(cells) + " |")
    lines.append(f"\n{' / '.join(sorted(names))}; differences relative to the largest magnitude, float32, "
                 f"against the same model on the CPU; the training step (4 layers x 4 heads x 128, batch 8, bfloat16) "
                 f"as its peak allocated on the GPU.")
    return "\n".join(lines) + "\n"


def decode_table(bench_json):
    """bench.py --sections=decode JSON: tokens/s per encoding and step, against nanoGPT's generate in the same process,
    and whether issue #22's bounds hold (eager static >= 3x, the best compiled step >= 5x)."""
    r = json.load(open(bench_json))
    lines = []
    for shape, block in r["decode"].items():
        rows = block["rows"]
        ng = rows["nanoGPT"]["nanogpt"]["tokens_per_s"]
        lines += [f"| encoding ({shape}) | reference | static | compiled | aot | static / nanoGPT "
                  "| best compiled / nanoGPT | >= 3x / >= 5x |", "|---" * 8 + "|"]
        for enc, modes in rows.items():
            if enc == "nanoGPT":
                continue
            tps = {m: modes[m]["tokens_per_s"] if m in modes else None
                   for m in ("reference", "static", "compiled", "aot")}
            best = max((tps[m] or 0) for m in ("compiled", "aot"))
            cells = " | ".join(f"{v:,.0f}" if v else "-" for v in tps.values())
            three, five = tps["static"] / ng, best / ng
            known = GPT(GPTConfig(n_layer=1, n_head=4, n_embd=32, block_size=int(shape.split(":")[1].split()[0]),
                                  vocab_size=8, pos_encoding=enc)).max_positions
            cached = known is None or known > r["args"]["gen_tokens"]   # else past them it re-encodes, as nanoGPT
            bounds = (f"{'yes' if three >= 3 else 'no'} / {('yes' if five >= 5 else 'no') if best else '-'}" if cached
                      else "n/a: no cache past the block")
            lines.append(f"| {enc} | {cells} | {three:.1f}x | {f'{five:.1f}x' if best else '-'} | {bounds} |")
        lines.append(f"| nanoGPT generate | | | | | {ng:,.0f} tokens/s | | |")
    a, m = r["args"], r["machine"]
    same = all(v.get("same_tokens") is not False for b in r["decode"].values() for e in b["rows"].values()
               for v in e.values())
    lines.append(f"\n{m.get('name', 'unnamed machine')}, torch {m['torch']}, {m['threads']} thread(s), "
                 f"{a['gen_tokens']} tokens from one, window {a['decode_window']}, median of {a['rounds']} rounds; "
                 f"every step drew the reference's tokens: {same}.")
    return "\n".join(lines) + "\n"


def paired_block(eval_csv):
    """compare_report's paired table of the report folder holding eval_csv (and eval_chunks.csv, if any)."""
    from measure.paired import paired_rows, paired_table, read_eval
    return "\n".join(paired_table(paired_rows(read_eval(os.path.dirname(eval_csv))))) + "\n"


def published_block(eval_chunks_csv):
    """The published-behaviours table of the report folder holding eval_chunks_csv (L: its shortest length)."""
    from measure import published
    from measure.paired import read_eval
    rows = read_eval(os.path.dirname(eval_chunks_csv))
    context = published.read_context(os.path.dirname(eval_chunks_csv))   # its context_gain.csv, where it has one
    return "\n".join(published.lines(rows, min(r["length"] for r in rows), context=context)) + "\n"


def recipe_lines(report_md):
    """The recipe and evaluation lines of a compare report."""
    return "".join(line for line in open(report_md) if line.startswith(("- recipe:", "- evaluation:")))


def wall_line(report_md):
    """The runs-and-wall-time line of a task suite's report."""
    return "".join(line for line in open(report_md) if "Wall time of this call" in line)


GENERATORS = {"reports/compare/runs.csv": ppl_table, "reports/compare-family/runs.csv": ppl_table,
              "reports/compare-cpu/runs.csv": ppl_table, "reports/compare-cpu/report.md": recipe_lines,
              "reports/compare-cpu/eval_chunks.csv": published_block,
              "reports/compare-code/runs.csv": ppl_table, "reports/compare-code/report.md": recipe_lines,
              "reports/compare-code/eval_chunks.csv": published_block, "reports/registry/runs.csv": registry_table,
              "reports/compare/eval.csv": paired_block, "reports/compare/report.md": recipe_lines,
              "reports/compare-new/runs.csv": label_table, "reports/compare-new/report.md": recipe_lines,
              "reports/dape-protocol/runs.csv": protocol_table, "reports/dape-protocol/report.md": recipe_lines,
              "reports/tasks/runs.csv": mastery_table, "reports/tasks-suite/runs.csv": mastery_table,
              "reports/tasks-suite/report.md": wall_line,
              "reports/tasks-arith/runs.csv": exact_table, "reports/tasks-arith/report.md": wall_line,
              "reports/tasks-recipes/trials.csv": recipe_trials_table,
              "reports/tasks-distance/distance.csv": distance_table,
              "benchmarks/raw/issue22_decode": decode_table, "benchmarks/raw/gpu_h200/": gpu_table,
              "benchmarks/raw/issue52_cope_train_memory/": train_memory_lengths,
              "benchmarks/raw/issue22_64k/": long_table, "benchmarks/raw/issue52_": long_table,
              "benchmarks/raw/issue22_16384_32768_default/": long_table,
              "benchmarks/raw/issue22_train_memory": train_memory_table,
              "benchmarks/raw/": train_step_table}   # the first prefix of a block's first source picks its generator


def generate(src):
    """The block for a marker's sources (space separated, relative to the repo root)."""
    paths = src.split()
    gen = next(g for prefix, g in GENERATORS.items() if paths[0].startswith(prefix))
    return gen(*(os.path.join(ROOT, p) for p in paths))


def regenerated(text):
    return BLOCK.sub(lambda m: f"<!-- generated from {m['src']} -->\n{generate(m['src'])}<!-- end -->", text)


def main():
    for page in PAGES:
        text = read(page)
        new = regenerated(text)
        if new != text:
            with open(os.path.join(ROOT, page), "w", encoding="utf-8") as f:
                f.write(new)
            print(f"updated {page}", file=sys.stderr)


if __name__ == "__main__":
    main()
