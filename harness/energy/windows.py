"""Measurement windows and the estimators that turn a sensor's readings into energy.

Windows are plain intervals over the sampler's shared series (:mod:`harness.energy.sampler`, :mod:`harness.energy.series`),
so they may nest or overlap freely (per prompt, per cell). Each estimator is a running integral
of a series, and a window's energy is its value at the end minus its value at the start:

* counter: the cumulative energy counter interpolated between its refreshes (exact to the
  counter's resolution at the refreshes; the meter's own windows align their edges with
  refreshes instead of interpolating, see :mod:`harness.energy.counter`);
* trapezoid (``linear``): power interpolated linearly between readings, each placed at the
  middle of its averaging window (half the window before its refresh);
* hold: each reading held from its refresh to the next — with the window extended by the
  sensor's averaging window plus one update and idle subtracted there, this is the protocol's
  edge-exact estimator for polled power;
* sum: the papers' method (dsbd App. B, mtad App. D) — each power sample inside the
  window times the sampling interval, summed; NaN (with the reason) when no sample falls inside.

The list-based functions below evaluate the same integrals on explicit readings (for tests and
for readers who want the definitions at a glance).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness.energy.sampler import Anchor
from harness.energy.series import COUNTER, HOLD, LINEAR, SUM, Series

ESTIMATORS = ("counter", "trapezoid", "sum")
CUMULATIVE = {"counter": COUNTER, "trapezoid": LINEAR, "sum": SUM, "hold": HOLD}


@dataclass(frozen=True)
class Window:
    """An open measurement window (the handle :meth:`EnergyMeter.start_window` returns)."""

    label: str
    start: float
    anchor: Anchor | None = None
    host: dict | None = None


@dataclass(frozen=True)
class IntervalEnergy:
    """Energy over one interval, the number of readings inside it, and why it is NaN if it is."""

    energy_j: float
    updates: int
    reason: str | None = None


def device_energy(start: dict, end: dict, estimator: str, interval_s: float, duration_s: float,
                  name: str) -> IntervalEnergy:
    """Energy of one device's series between two cumulative snapshots (see ``Sampler.values``)."""
    key = CUMULATIVE[estimator]
    n = end["count"][0] - start["count"][0]
    value = end[key] - start[key]
    if key == SUM:
        if n <= 0:
            return IntervalEnergy(math.nan, 0, f"{name}: no sample fell inside the {duration_s:.3f} s window "
                                               f"(sampling every {interval_s:g} s)")
        value *= interval_s
    if math.isnan(value):
        return IntervalEnergy(value, n, f"{name}: window of {duration_s:.3f} s is not bracketed by counter "
                                        "updates (shorter than the update period, or at the edge of the readings)")
    return IntervalEnergy(value, n)


def _series(times: list[float], values: list[float], kind: str) -> Series:
    series = Series("readings", kind)
    for t, v in zip(times, values):
        series.append(t, v)
    return series


def trapezoid_energy(times: list[float], watts: list[float], a: float, b: float) -> float:
    """Trapezoid rule over power readings, interpolated at the ends, the first and last readings
    held beyond them (no reading from outside the window leaks in)."""
    return _series(times, watts, "power").energy(a, b, LINEAR)


def counter_energy(times: list[float], joules: list[float], a: float, b: float) -> float:
    """Counter interpolated between its updates at both ends; NaN outside the updates."""
    return _series(times, joules, "energy").energy(a, b, COUNTER)


def sample_sum_energy(times: list[float], watts: list[float], a: float, b: float, interval_s: float) -> float:
    """Σ samples in (a, b] × sampling interval (the papers' method)."""
    series = _series(times, watts, "power")
    return (series.cumulative(b, SUM) - series.cumulative(a, SUM)) * interval_s


def with_hold_points(times: list[float], values: list[float], update_s: float) -> tuple[list[float], list[float]]:
    """Readings are kept only when they change, so a gap longer than 1.5 update periods means the
    sensor kept reporting the same value: hold it until one update before the next change (the
    rule :meth:`Series.append` applies as readings arrive)."""
    series = Series("readings", "power", update_s=update_s)
    for t, v in zip(times, values):
        series.append(t, v)
    return series.times, series.values
