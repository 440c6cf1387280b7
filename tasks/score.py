"""Scoring a model trained on a task: exact-match accuracy (the whole answer right) and per-token
accuracy against length, from 1x to 16x the training length, decoding each answer token greedily
through the KV cache; for passkey also a (length x depth) grid and the effective context window of
Chen et al. 2023 (PI, https://arxiv.org/abs/2306.15595, section 3.2), and for the retrieval tasks (those with
copy_distances: passkey, mqar) with distance=True exact match by the distance from the key to its query, in bins of
L (score_distances), on examples drawn to cover the bins evenly. Every point scores the same
`samples` examples, from seeds never drawn in training; an encoding with a position table gets None
past it (docs/tasks.md). evaluate.py and compare.py call score_checkpoints.
"""
import torch

from measure.progress import Progress
from training import sampling
from training import checkpoint
import tasks
from tasks.common import answer_runs
from tasks.data import places_of

MULTIPLES = (1, 2, 4, 8, 16)          # default lengths, in units of the training length
SAMPLES = 200                         # examples per point
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)  # passkey grid: where the key sits in the filler
BATCH_TOKENS = 16384                  # bounds the memory of long lengths
SEED_BASE = 1 << 64                   # scoring seeds lie above every training seed (< 2**63 + 1)
PI_THRESHOLD = 0.2                    # PI's effective window: retrieval >= 20% at every distance up to k
DISTANCE_BINS = (0, 0.25, 0.5, 1, 2, 4, 8, 16)   # retrieval by distance: bin edges, in units of L


def load_task_model(out_dir, overrides=None, device="cpu", ckpt=None):
    """(model in eval mode, task name, training length) of a checkpoint trained with --task.
    overrides: model keys and encoding settings (window, sinks, rope_scaling, rope_factor, ...)."""
    ckpt = ckpt or checkpoint.load(out_dir)
    name = ckpt["config"].get("task")
    if not name:
        raise checkpoint.CheckpointError(f"{out_dir} was trained on a dataset, not a task; train one with "
                                         f"python train.py configs/tasks/copy.py (see tasks/)")
    tasks.get(name)
    return checkpoint.build_model(ckpt, overrides, device), name, ckpt["model_args"]["block_size"]


def examples(task, length, samples, **kw):
    """ids (samples, length) of fixed examples and their answer mask (length,), the same for all."""
    exs = [task.generate(SEED_BASE + length * 1_000_000 + i, length, **kw) for i in range(samples)]
    mask = torch.tensor(exs[0].mask)
    assert all(ex.mask == exs[0].mask for ex in exs), "a task's answer positions must depend on the length alone"
    return torch.tensor([ex.ids for ex in exs]), mask


def scoring_positions(config):
    """(n, batch) -> (n,) positions a checkpoint of training config `config` is scored on (sampling.for_evaluation,
    drawn once per length and batch, seeded by both), or None: 0..n-1."""
    method, m = config.get("position_sampling", ""), config.get("max_position") or config["block_size"]
    if sampling.for_evaluation(method, 1, m) is None:
        return None
    return lambda n, b: sampling.for_evaluation(method, n, m, torch.Generator().manual_seed(n * 1_000_003 + b))


@torch.no_grad()
def greedy(model, ids, mask, pos=None, places=None):
    """ids (B, n) with the answer positions (mask, (n,)) replaced by the model's greedy
    predictions, each fed back before the next; one KV-cache pass over the sequence. pos: (n,) explicit
    increasing positions (scoring_positions; the cache continues at them), None: 0..n-1. places: (B, n) the
    task's places of the tokens (TaskData.places), or None."""
    out = ids.clone()
    model.setup_cache(ids.shape[0], ids.shape[1] if pos is None else int(pos[-1]) + 1)
    try:
        fed = 0
        for a in mask.nonzero().squeeze(1).tolist():   # the token at a is predicted from the tokens before it
            kw = {} if pos is None else {"pos": pos[fed:a]}
            kw.update({} if places is None else {"places": places[:, fed:a]})
            logits, _ = model(out[:, fed:a], **kw)                                  # (B, a - fed, V)
            out[:, a] = logits[:, -1].argmax(-1)
            fed = a
    finally:
        model.clear_cache()
    return out


def fits(model, length):
    limit = model.max_positions   # the model's: the least of its encodings' (a per-layer schedule has several)
    return limit is None or length - 1 <= limit


def decoded_right(model, task, ids, mask, batch_tokens=BATCH_TOKENS, positions=None):
    """(samples, answer tokens) bool: whether greedy decoding got each answer token of ids (samples, n) right."""
    samples, length = ids.shape
    device = next(model.parameters()).device
    per = max(1, batch_tokens // length)
    pos = [None if positions is None else positions(length, b).to(device) for b in range(0, samples, per)]
    places = places_of(task.places, ids).to(device) if hasattr(task, "places") else None   # from the questions
    return torch.cat([greedy(model, ids[b:b + per].to(device), mask.to(device), p,
                             None if places is None else places[b:b + per])[:, mask].cpu() == ids[b:b + per, mask]
                      for b, p in zip(range(0, samples, per), pos)])                    # (samples, answer)


def accuracy(model, task, length, samples=SAMPLES, batch_tokens=BATCH_TOKENS, positions=None, **kw):
    """(exact, per_token) accuracy at one length; (None, None) past a position table. positions:
    scoring_positions' function, or None."""
    if not fits(model, length):
        return None, None
    ids, mask = examples(task, length, samples, **kw)
    right = decoded_right(model, task, ids, mask, batch_tokens, positions)
    return right.all(1).float().mean().item(), right.float().mean().item()


def distance_edges(train_len, bins=DISTANCE_BINS):
    """The bins' edges in tokens for training length train_len."""
    return [round(b * train_len) for b in bins]


def by_distance(model, task, length, train_len, samples=SAMPLES, batch_tokens=BATCH_TOKENS, positions=None,
                bins=DISTANCE_BINS):
    """Rows {length, lo, hi, answers, right, exact} at one length, one a bin [lo L, hi L) of copy distance
    (task.copy_distances, one per answer): the answers scored in the bin, those right in every token, their
    fraction (None without answers, and at every bin past a position table). The examples' distances are drawn
    to cover the bins evenly (the tasks' generate(..., spread=edges))."""
    edges = distance_edges(train_len, bins)
    rows = [dict(length=length, lo=a, hi=b, answers=0, right=0, exact=None) for a, b in zip(bins, bins[1:])]
    if not fits(model, length):
        return rows
    ids, mask = examples(task, length, samples, spread=edges)
    right = decoded_right(model, task, ids, mask, batch_tokens, positions)
    cols = (torch.cumsum(mask.long(), 0) - 1).tolist()   # an answer token's column in right
    for i, row in enumerate(ids.tolist()):
        for (start, end), d in zip(answer_runs(mask.tolist()), task.copy_distances(row)):
            k = sum(d >= e for e in edges[1:])           # d in [edges[k], edges[k + 1])
            if k < len(rows):
                rows[k]["answers"] += 1
                rows[k]["right"] += int(right[i, cols[start]:cols[end - 1] + 1].all())
    for r in rows:
        r["exact"] = r["right"] / r["answers"] if r["answers"] else None
    return rows


def distance_task(name):
    """The task `name` if it has a key-query distance (copy_distances), else a one-line ValueError."""
    task = tasks.get(name)
    if not hasattr(task, "copy_distances"):
        raise ValueError(f"task {name} has no key-query distance; score by distance a retrieval task "
                         f"({', '.join(n for n, t in tasks.REGISTRY.items() if hasattr(t, 'copy_distances'))})")
    return task


def score_distances(model, name, lengths, train_len, samples=SAMPLES, positions=None):
    """by_distance's rows of task `name` at each length (a task with copy_distances)."""
    task = distance_task(name)
    return [r for n in lengths for r in by_distance(model, task, n, train_len, samples, positions=positions)]


def score_lengths(model, name, lengths, samples=SAMPLES, positions=None):
    """Rows {length, exact, token, samples} of task `name` at each length (>= its MIN_LENGTH)."""
    task = tasks.get(name)
    for n in lengths:
        tasks.common.check_length(name, task.MIN_LENGTH, n)
    rows, progress = [], Progress("score", sum(lengths), "tokens of its lengths", name)   # longer costs more
    for n in lengths:
        exact, token = accuracy(model, task, n, samples, positions=positions)
        rows.append(dict(length=n, exact=exact, token=token, samples=samples))
        progress.step(n)
    return rows


def passkey_grid(model, lengths, depths=DEPTHS, samples=SAMPLES, positions=None):
    """Rows {length, depth, distance, exact, token, samples}: passkey retrieval at each (length, depth)
    (lengths checked by score_lengths)."""
    task, rows = tasks.passkey, []
    for n in lengths:
        for d in depths:
            exact, token = accuracy(model, task, n, samples, positions=positions, depth=d)
            dist = task.distance(task.generate(0, n, depth=d).ids)
            rows.append(dict(length=n, depth=d, distance=dist, exact=exact, token=token, samples=samples))
    return rows


def effective_window(grid):
    """PI's effective context window: the largest length k such that passkey retrieval (exact match)
    succeeds at least 20% of the time at every measured length up to k and every depth (PI asks at
    one depth, the key about k tokens back); 0 if the shortest length fails."""
    k = 0
    for n in sorted({r["length"] for r in grid}):
        if any(r["exact"] is None or r["exact"] < PI_THRESHOLD for r in grid if r["length"] == n):
            break
        k = n
    return k


def score_checkpoints(dirs, overrides=None, lengths=None, samples=SAMPLES, depths=DEPTHS, device="cpu", ckpts=None,
                      distance=False):
    """{task, train_len, overrides, samples, runs: {dir: {encoding, rows[, grid, effective_window][, distance]}}}
    for checkpoints of one task, scored at `lengths` (default MULTIPLES x the training length);
    passkey also on the (length x depth) grid, each on the positions it was trained on (scoring_positions);
    distance: also score_distances' rows. Prints one line per checkpoint."""
    ckpts = {d: (ckpts or {}).get(d) or checkpoint.load(d) for d in dirs}
    models = [(d, *load_task_model(d, overrides, device, ckpts[d])) for d in dirs]
    names = {name for _, _, name, _ in models}
    if len(names) > 1:
        raise ValueError(f"these checkpoints were trained on different tasks ({', '.join(sorted(names))}); "
                         f"score one task at a time")
    train_len = models[0][3]
    if distance:
        distance_task(models[0][2])
    lengths = lengths or [k * train_len for k in MULTIPLES]
    out = {"task": models[0][2], "train_len": train_len, "overrides": overrides or {}, "samples": samples, "runs": {}}
    for d, model, name, _ in models:
        positions = scoring_positions(ckpts[d]["config"])
        rows = score_lengths(model, name, lengths, samples, positions)
        run = {"encoding": model.pos_name, "rows": rows}
        if name == "passkey":
            run["grid"] = passkey_grid(model, lengths, depths, samples, positions)
            run["effective_window"] = effective_window(run["grid"])
        if distance:
            run["distance"] = score_distances(model, name, lengths, train_len, samples, positions)
        out["runs"][d] = run
        print(f"{d} ({model.pos_name}, {name}): " + ", ".join(
            f"{r['length']}: {'n/a' if r['exact'] is None else format(r['exact'], '.0%')}" for r in rows)
            + (f"; effective window {run['effective_window']}" if "grid" in run else ""), flush=True)
    return out
