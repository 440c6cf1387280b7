"""measure/progress.py: progress lines with an estimate, only for work long enough to need one, throttled, and
advanced layer by layer through one long forward."""
import io

import torch
from torch import nn

from measure import progress
from measure.progress import Progress, fmt_duration


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_silent_when_short_then_throttled_with_an_estimate():
    clock, out = Clock(), io.StringIO()
    p = Progress("evaluate", 16, "windows", "length 400000", stream=out, clock=clock)
    clock.now += 4.0
    p.step()                                   # 4 s in: short work says nothing
    assert out.getvalue() == ""
    clock.now += 4.0
    p.step(2)                                  # 8 s for 3 of 16: 13 more at 8/3 s each
    assert out.getvalue() == "[evaluate] length 400000: 19% of 16 windows, 8 s, ~35 s left\n"
    clock.now += 2.0
    p.step()                                   # 2 s after the last line: not yet
    assert out.getvalue().count("\n") == 1
    clock.now += 4.0
    p.step(4)                                  # 14 s for 8 of 16
    assert out.getvalue().splitlines()[-1] == "[evaluate] length 400000: 50% of 16 windows, 14 s, ~14 s left"
    clock.now += 600.0
    p.step(8)                                  # the end: the caller reports the result, not a line of 0 s left
    assert out.getvalue().count("\n") == 2


def test_durations_at_the_precision_of_an_estimate():
    assert [fmt_duration(s) for s in (0.4, 41, 59.6, 150, 3599, 3600, 7500)] == [
        "0 s", "41 s", "1 min", "3 min", "1 h 00 min", "1 h 00 min", "2 h 05 min"]


def test_a_long_forward_advances_layer_by_layer(monkeypatch):
    monkeypatch.setattr(progress, "AFTER", 0.0)
    monkeypatch.setattr(progress, "EVERY", 0.0)
    clock, out = Clock(), io.StringIO()
    layers = nn.ModuleList(nn.Identity() for _ in range(4))
    p = Progress("evaluate", 2, "windows", stream=out, clock=clock)
    with p.across(layers, 1):
        for layer in layers:
            clock.now += 1.0
            layer(torch.zeros(1))
    assert out.getvalue().splitlines() == ["[evaluate] 12% of 2 windows, 1 s, ~7 s left",
                                           "[evaluate] 25% of 2 windows, 2 s, ~6 s left",
                                           "[evaluate] 38% of 2 windows, 3 s, ~5 s left",
                                           "[evaluate] 50% of 2 windows, 4 s, ~4 s left"]
    with p.across(layers, 1):                  # by chunks of queries: every layer twice, never past its share
        for layer in [*layers, *layers]:
            layer(torch.zeros(1))
    assert p.done == 2 and all(not layer._forward_hooks for layer in layers)
