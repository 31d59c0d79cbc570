"""Measurement windows: energy over time intervals from the sampler's series.

Windows are plain intervals over shared series, so they may nest or overlap freely (per
prompt, per cell). Three estimators:

* counter: the cumulative energy counter's rise between its first and last updates inside the
  window, scaled to the window's length (exact to the counter's resolution at steady power);
* trapezoid: the trapezoid rule over the power readings inside the window;
* sum: the seeds' method (seed 000 App. B, seed 002 App. D) — each power sample inside the
  window times the sampling interval, summed.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np

from harness.energy.sampler import Series

ESTIMATORS = ("counter", "trapezoid", "sum")


@dataclass(frozen=True)
class Window:
    """An open measurement window (the handle :meth:`EnergyMeter.start_window` returns)."""

    label: str
    start: float


@dataclass(frozen=True)
class IntervalEnergy:
    """Energy over one interval, the number of sensor updates inside it, and why it is NaN if it is."""

    energy_j: float
    updates: int
    reason: str | None = None


def _inside(times: list[float], a: float, b: float) -> slice:
    return slice(bisect.bisect_left(times, a), bisect.bisect_right(times, b))


def trapezoid_energy(times: list[float], watts: list[float], a: float, b: float) -> float:
    """Trapezoid rule over the readings inside [a, b], the first and last held out to the ends,
    so no reading from outside the window leaks in; interpolated if none falls inside."""
    inside = _inside(times, a, b)
    ts, ws = (times[inside], watts[inside]) if inside.stop > inside.start else (times, watts)
    xs = np.array([a, *[t for t in ts if a < t < b], b])
    return float(np.trapezoid(np.interp(xs, ts, ws), xs))


def counter_energy(times: list[float], joules: list[float], a: float, b: float) -> float:
    """Counter difference between the first and last updates inside [a, b], scaled to the
    window's length at the mean power between them; with fewer than two updates inside,
    interpolated between the updates around the window (NaN if there are none on one side)."""
    inside = _inside(times, a, b)
    if inside.stop - inside.start >= 2:
        first, last = inside.start, inside.stop - 1
        return (joules[last] - joules[first]) / (times[last] - times[first]) * (b - a)
    if not times or times[0] > a or times[-1] < b:
        return math.nan
    ends = np.interp([a, b], times, joules)
    return float(ends[1] - ends[0])


def sample_sum_energy(times: list[float], watts: list[float], a: float, b: float, interval_s: float) -> float:
    return float(sum(watts[_inside(times, a, b)]) * interval_s)


def with_hold_points(times: list[float], values: list[float], update_s: float) -> tuple[list[float], list[float]]:
    """Readings are kept only when they change, so a gap longer than the update period means the
    sensor kept reporting the same value: hold it until one update before the next change."""
    if not math.isfinite(update_s) or len(times) < 2:
        return times, values
    ts, vs = [times[0]], [values[0]]
    for t, v in zip(times[1:], values[1:]):
        if t - ts[-1] > 1.5 * update_s:
            ts.append(t - update_s)
            vs.append(vs[-1])
        ts.append(t)
        vs.append(v)
    return ts, vs


def interval_energy(series: Series, a: float, b: float, estimator: str, interval_s: float,
                    update_s: float = math.nan) -> IntervalEnergy:
    """Energy of ``series`` over [a, b]; NaN with the reason if the source failed before ``b``.
    ``update_s`` is the sensor's update period (for :func:`with_hold_points`; NaN if unknown)."""
    if series.failed_at is not None and series.failed_at <= b:
        return IntervalEnergy(math.nan, 0, f"{series.failure} (at t={series.failed_at:.3f} s)")
    if not series.times:
        if series.kind == "power" and series.initial is not None:
            return IntervalEnergy(series.initial * (b - a), 0)
        return IntervalEnergy(math.nan, 0, f"{series.name} gave no readings")
    inside = _inside(series.times, a, b)
    updates = inside.stop - inside.start
    if estimator == "counter":
        energy = counter_energy(*with_hold_points(series.times, series.values, update_s), a, b)
    elif estimator == "trapezoid":
        energy = trapezoid_energy(*with_hold_points(series.times, series.values, update_s), a, b)
    elif estimator == "sum":
        energy = sample_sum_energy(series.times, series.values, a, b, interval_s)
    else:
        raise ValueError(f"unknown estimator '{estimator}'; valid: {', '.join(ESTIMATORS)}")
    if math.isnan(energy):
        return IntervalEnergy(energy, updates, f"{series.name}: window of {b - a:.3f} s is shorter than the "
                                               "counter's update period and not bracketed by updates")
    return IntervalEnergy(energy, updates)
