"""Interleaved timing of several implementations in one process (benchmarks/README.md).

The rules: warm every implementation up first; then take at least 7 samples of each, every sample
at least 20 ms of wall time (a fast call is repeated ``number`` times inside a sample and the
sample divided by ``number``); take the samples round-robin - one sample of each implementation
per round, the starting implementation rotating from round to round - so slow drifts and bursts of
machine noise hit every implementation alike; report the median per call and ratios of medians
measured in the same run, never a single absolute time.

The garbage collector stays enabled while timing (unlike :mod:`timeit`): autograd graphs make
garbage, and collecting it is part of what a caller pays.

>>> res = interleaved({"a": lambda: sum(range(100)), "b": lambda: sum(range(200))},
...                   samples=7, min_sample_time=0.001)                       # doctest: +SKIP
>>> res["b"].median / res["a"].median                                          # doctest: +SKIP
1.9...
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

MIN_SAMPLES = 7
MIN_SAMPLE_TIME = 0.020  # seconds
_clock = time.perf_counter


@dataclass
class Timing:
    """Samples of one implementation: seconds per call in each sample, ``number`` calls per sample."""

    name: str
    per_call: list[float]
    number: int
    sample_seconds: list[float]  # wall time of each whole sample

    @property
    def median(self) -> float:
        return statistics.median(self.per_call)

    @property
    def quartiles(self) -> tuple[float, float]:
        q = statistics.quantiles(self.per_call, n=4, method="inclusive")
        return q[0], q[2]

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 = the middle half lies within 5%)."""
        q1, q3 = self.quartiles
        return (q3 - q1) / self.median

    def as_dict(self) -> dict:
        q1, q3 = self.quartiles
        return {"name": self.name, "median_s": self.median, "q1_s": q1, "q3_s": q3,
                "calls_per_sample": self.number, "samples": len(self.per_call),
                "min_sample_s": min(self.sample_seconds), "per_call_s": list(self.per_call)}


def _run(fn: Callable[[], object], number: int) -> float:
    t0 = _clock()
    for _ in range(number):
        fn()
    return _clock() - t0


def calibrate(fn: Callable[[], object], min_sample_time: float = MIN_SAMPLE_TIME,
              margin: float = 1.3) -> int:
    """Calls per sample so that one sample lasts at least ``min_sample_time`` (with a margin).

    Grows ``number`` 1, 2, 5, 10, 20, ... until a run lasts 1/10 of the target, then scales it;
    every run doubles as warm-up.
    """
    number = 1
    target = min_sample_time * margin
    while True:
        elapsed = _run(fn, number)
        if elapsed >= target:
            return number
        if elapsed >= target / 10:
            return max(number, math.ceil(number * target / elapsed))
        for step in (1, 2, 5):
            if step * 10 ** int(math.log10(number)) > number:
                number = step * 10 ** int(math.log10(number))
                break
        else:
            number = 10 ** (int(math.log10(number)) + 1)


def interleaved(impls: Mapping[str, Callable[[], object]], *, samples: int = MIN_SAMPLES,
                min_sample_time: float = MIN_SAMPLE_TIME, warmup_time: float = 0.05,
                warmup_calls: int = 3) -> dict[str, Timing]:
    """Time zero-argument callables against each other; returns ``{name: Timing}``.

    Warm-up: each implementation runs at least ``warmup_calls`` times and ``warmup_time`` seconds,
    then is calibrated (:func:`calibrate`).  A sample found shorter than ``min_sample_time`` (the
    machine got faster after calibration) doubles that implementation's ``number`` and is taken
    again, so every recorded sample is at least ``min_sample_time`` long.
    """
    if samples < 1:
        raise ValueError("samples must be >= 1")
    names = list(impls)
    for name in names:
        fn = impls[name]
        t0 = _clock()
        calls = 0
        while calls < warmup_calls or _clock() - t0 < warmup_time:
            fn()
            calls += 1
    numbers = {name: calibrate(impls[name], min_sample_time) for name in names}
    per_call: dict[str, list[float]] = {name: [] for name in names}
    walls: dict[str, list[float]] = {name: [] for name in names}
    for r in range(samples):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            while True:
                elapsed = _run(impls[name], numbers[name])
                if elapsed >= min_sample_time:
                    break
                # Keep earlier samples (they were long enough) and continue with a larger number.
                numbers[name] *= 2
            per_call[name].append(elapsed / numbers[name])
            walls[name].append(elapsed)
    return {name: Timing(name, per_call[name], numbers[name], walls[name]) for name in names}


def ratio(a: Timing | None, b: Timing | None) -> float | None:
    """``a.median / b.median`` (None if either is missing)."""
    if a is None or b is None:
        return None
    return a.median / b.median


def format_seconds(s: float) -> str:
    """``0.0431`` -> ``'43.1 ms'``; three significant digits, units s/ms/us/ns."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if s >= scale or unit == "ns":
            v = s / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    raise AssertionError("unreachable")


def format_ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"
