"""Training a task to mastery (--stop_at_mastery=BAR, docs/tasks.md "Tasks to mastery"): at each evaluation past
the run's start, the exact match at the training length (block_size) on mastery_samples held-out examples; the run
stops at the first evaluation at or past BAR, max_iters its cap. The checkpoint keeps the record (MASTERY_KEY:
reached, the iteration of that evaluation or None; exact, the last check's score; checked_at, its iteration; bar;
samples), so that a resumed run that reached the bar trains no further and compare.py's task report reads the
iterations it took.

The held-out examples come from seeds of their own: score.SEED_BASE's scheme moved up to HELD_OUT, i.e.
2**65 + length * 10**6 + i, above every training seed (< 2**63 + 1, tasks/data.py) and every final scoring seed
(2**64 + length * 10**6 + i, tasks/score.py), so the stopping rule never sees the examples the run is scored on.
"""
from dataclasses import asdict

import torch
import torch.distributed as dist

import tasks
from tasks import score

MASTERY_KEY = "mastery"
HELD_OUT = 2 * score.SEED_BASE   # where the check's seeds start


class HeldOut:
    """A task whose examples are drawn from the held-out seeds: score.accuracy's seed s becomes
    s - SEED_BASE + HELD_OUT; everything else (MIN_LENGTH, places, ...) is the task's own."""

    def __init__(self, task):
        self.task = task

    def __getattr__(self, name):
        return getattr(self.task, name)

    def generate(self, seed, length, **kw):
        return self.task.generate(seed - score.SEED_BASE + HELD_OUT, length, **kw)


def held_out_exact(model, cfg, rt):
    """Exact match of `model` at block_size on the run's held-out examples, scored as the final score is (greedy
    through the KV cache, on the positions it trains on: score.scoring_positions), in eval mode."""
    model.eval()
    try:
        with rt.ctx:
            exact, _ = score.accuracy(model, HeldOut(tasks.get(cfg.task)), cfg.block_size, cfg.mastery_samples,
                                      positions=score.scoring_positions(asdict(cfg)))
    finally:
        model.train()
    return exact


def check(model, cfg, st, rt, log):
    """At an evaluation: -> whether the run has reached the bar (False with stop_at_mastery off). Rank 0 scores
    (every rank under FSDP, whose forward needs them all) and the ranks agree on rank 0's score; st.mastery keeps
    the record the next save writes."""
    if not cfg.stop_at_mastery:
        return False
    exact = held_out_exact(model, cfg, rt) if rt.master or rt.fsdp else 0.0
    if rt.ddp:
        agreed = torch.tensor([exact], dtype=torch.float64, device=rt.device)
        dist.broadcast(agreed, 0)
        exact = agreed.item()
    reached = exact >= cfg.stop_at_mastery
    st.mastery = dict(reached=st.iter_num if reached else None, exact=exact, checked_at=st.iter_num,
                      bar=cfg.stop_at_mastery, samples=cfg.mastery_samples)
    if rt.master:
        print(f"step {st.iter_num}: exact match at L={cfg.block_size} on {cfg.mastery_samples} held-out examples "
              f"{exact:.1%} (bar {cfg.stop_at_mastery:.0%})" + (": reached, training stops" if reached else ""))
        log("mastery", iter=st.iter_num, exact=exact, bar=cfg.stop_at_mastery, reached=reached)
    return reached


def reached_before(ckpt, cfg):
    """The iteration at which a resumed run's checkpoint reached the bar this run asks for, or None (then it
    trains on): a record of a lower bar than this one does not count."""
    got = (ckpt or {}).get(MASTERY_KEY) or {}
    if not cfg.stop_at_mastery or got.get("reached") is None or got["exact"] < cfg.stop_at_mastery:
        return None
    return got["reached"]
