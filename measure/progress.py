"""Progress with an estimate of the time left, for work long enough to leave a user wondering: one line to stderr,
such as "[evaluate] length 400000: 38% of 2 windows, 41 s, ~1 min left", at most every EVERY seconds and only once
the work has run AFTER seconds, so that short work (every test) prints nothing. The estimate assumes the work left
costs what the work done did. Used by measure/evaluation.py (the windows of one length, advanced layer by layer,
since one window of a long length is one forward of minutes) and compare.py (its runs). A leaf: it imports
nothing from the project.
"""
import contextlib
import sys
import threading
import time

AFTER = 5.0    # seconds of work before the first line
EVERY = 5.0    # seconds between lines


def fmt_duration(seconds):
    """'41 s', '3 min', '2 h 05 min': a duration at the precision an estimate deserves."""
    s = int(seconds + 0.5)
    if s < 60:
        return f"{s} s"
    minutes = int(s / 60 + 0.5)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


class Progress:
    """step(n) after n of `total` units (a fraction of one too); says "[who] what: 38% of total unit, elapsed,
    ~left" when due. Safe to call from several threads (compare.py's jobs)."""

    def __init__(self, who, total, unit, what="", stream=None, clock=time.monotonic):
        self.who, self.total, self.unit, self.what = who, total, unit, what
        self.stream, self.clock = stream, clock
        self.start = clock()
        self.done = 0
        self.said = None   # when the last line was written
        self.lock = threading.Lock()

    def step(self, n=1):
        with self.lock:
            self.done += n
            now = self.clock()
            elapsed = now - self.start
            since, wait = (elapsed, AFTER) if self.said is None else (now - self.said, EVERY)
            if since >= wait and self.total - self.done > 1e-9:   # at the end, the caller says what the work gave
                self.said = now
                print(self.line(elapsed), file=self.stream or sys.stderr, flush=True)

    @contextlib.contextmanager
    def across(self, modules, n):
        """One step of n units made of one call to each of `modules` (a model's layers, torch modules): each call
        advances n / len(modules), short of n until the step ends (calls made more often, by chunks of queries,
        do not overrun it)."""
        modules = list(modules)
        share, given = n / max(1, len(modules)), [0.0]

        def seen(*_):
            if given[0] + share < n - 1e-9:
                given[0] += share
                self.step(share)
        handles = [m.register_forward_hook(seen) for m in modules]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
        self.step(n - given[0])

    def line(self, elapsed):
        left = elapsed / self.done * (self.total - self.done)
        head = f"[{self.who}] " + (f"{self.what}: " if self.what else "")
        return (f"{head}{100 * self.done / self.total:.0f}% of {self.total} {self.unit}, {fmt_duration(elapsed)}, "
                f"~{fmt_duration(left)} left")
