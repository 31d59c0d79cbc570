"""Plain windows: any region bracketed by ``start_window`` / ``stop_window`` (the cell, a
sub-region), and every measurement with ``energy.protocol=false`` (``energy=naive`` among them),
read off the sampler's cumulative values with no alignment and no repetition — and their bounds.

* counter: each edge extrapolated with the power of the counter interval next to it inside the
  window (± half the difference from the interval straddling it), or interpolated; plus the
  counter's measured resolution;
* polled, trapezoid: edges ± (half the averaging window + one update) at full power, and the
  unseen fraction of a part-time reading (aliasing);
* the papers' 1 Hz sum (``integration: sum``): its own sampling error — the window holds T/Δ
  samples ± one (each edge ± one sample interval Δ at the window's mean power) and each sample
  sees only min(W, Δ) of its Δ (the readings' scatter over the unseen fraction); no bound with
  fewer than two samples.
"""
from __future__ import annotations

import math

from harness.energy.crosscheck import polled_estimate
from harness.energy.readout import build_reading
from harness.energy.reading import EnergyReading
from harness.energy.series import COUNTER
from harness.energy.trials import Trial
from harness.energy.windows import Window, device_energy

NAN = math.nan


def _slope(p: tuple[float, float], q: tuple[float, float]) -> float:
    return (q[1] - p[1]) / (q[0] - p[0]) if q[0] > p[0] else NAN


def counter_window_energy(start: dict, end: dict, a: float, b: float) -> tuple[float, float]:
    """Counter energy of a free window [a, b] on one device, and the edges' error scale (J).

    Where the window holds at least two refreshes after ``a`` (and two before ``b``), each edge is
    extrapolated with the power of the counter interval next to it inside the window: exact while
    power is steady over ~one update at the edge. Otherwise the counter is interpolated at both
    ends. Error scale: half the difference between the inside and straddling intervals' powers
    times the edge's length; up to half a counter interval at the mean power per interpolated edge."""
    before_a, after_a = start["around"]
    before_b, after_b = end["around"]
    e_a, e_b = start[COUNTER], end[COUNTER]
    err = 0.0
    if len(after_a) == 2 and after_a[1][0] <= b:
        inside = _slope(after_a[0], after_a[1])
        e_a = after_a[0][1] - inside * (after_a[0][0] - a)
        straddle = _slope(before_a[-1], after_a[0]) if before_a else inside
        err += abs(inside - straddle) / 2 * (after_a[0][0] - a) if math.isfinite(straddle) else 0.0
    if len(before_b) == 2 and before_b[0][0] >= a:
        inside = _slope(before_b[0], before_b[1])
        e_b = before_b[1][1] + inside * (b - before_b[1][0])
        straddle = _slope(before_b[1], after_b[0]) if after_b else inside
        err += abs(inside - straddle) / 2 * (b - before_b[1][0]) if math.isfinite(straddle) else 0.0
    energy = e_b - e_a
    interpolated = (len(after_a) < 2 or after_a[1][0] > b) + (len(before_b) < 2 or before_b[0][0] < a)
    if interpolated and math.isfinite(energy) and b > a:
        points = before_a + after_a
        spacing = [q[0] - p[0] for p, q in zip(points, points[1:])]
        err += interpolated * 0.5 * (max(spacing) if spacing else 0.1) * energy / (b - a)
    return energy, err


def naive_bound(state, start: list[dict], end: list[dict], energy: float, seconds: float) -> tuple[float, str]:
    """Bound of the 1 Hz sum over one window (see the module docstring): NaN with fewer than two samples."""
    power, step = state.primary, state.cfg.interval_s
    n = sum(y["count"][0] - x["count"][0] for x, y in zip(start, end))
    s1 = sum(y["count"][1] - x["count"][1] for x, y in zip(start, end))
    s2 = sum(y["count"][2] - x["count"][2] for x, y in zip(start, end))
    per_device = n / max(state.devices, 1)
    if per_device < 2 or not energy > 0:
        return NAN, f"{power.name} summed every {step:g} s: fewer than two samples in the window, no bound"
    window = state.power_window(power)
    seen = min(window, step) / step if window is not None else 0.0
    mean_r = s1 / n
    cv = math.sqrt(max(s2 / n - mean_r ** 2, 0.0)) / mean_r if mean_r > 0 else 0.0
    count = (step + min(window or 0.0, step)) / seconds
    sampling = 2 * cv * math.sqrt((1 - seen) / per_device)
    return count + sampling, (f"{power.name} sampled every {step:g} s and summed (the papers' method): "
                              f"{per_device:.0f} samples, edges ± one sample and the readings' averaging "
                              f"{100 * count:.1f} %, sampling {100 * sampling:.1f} % (each sample sees "
                              f"{100 * seen:.0f} % of its interval)")


def window_reading(state, handle: Window, end: float, host_end: dict | None) -> EnergyReading:
    """A plain window [start, end]: the estimator over the sampler's cumulative values."""
    a, b, primary = handle.start, end, state.primary
    reason, failed = state.trouble(primary, a, b, hidden_ok=primary.kind == "energy")
    va, vb = state.values(handle.anchor, primary), state.values(b, primary)
    estimator = "counter" if primary.kind == "energy" else ("sum" if state.cfg.integration == "sum" else "trapezoid")
    period = state.update_period(primary)
    p_eff = period if math.isfinite(period) else 0.1
    energy, edge_err = 0.0, 0.0
    for d in range(state.devices):
        if estimator == "counter":
            part, err = counter_window_energy(va[d], vb[d], a, b)
            edge_err += err
            if math.isnan(part) and reason is None:
                reason = (f"{primary.name}: window of {b - a:.3f} s is not bracketed by counter updates "
                          "(shorter than the update period, or at the edge of the readings)")
            energy += part
            continue
        part = device_energy(va[d], vb[d], estimator, state.cfg.interval_s, b - a, primary.name)
        reason = reason or part.reason
        energy += part.energy_j
    if estimator == "counter":
        q = state.sensors[primary.name].resolution_j
        bound = (edge_err + 0.78 * (q if math.isfinite(q) else 1e-3) * state.devices) / energy if energy > 0 else NAN
        basis = ("NVML energy counter, one window: each edge extrapolated from the power of the counter interval "
                 "next to it inside the window (± half the difference from the interval straddling it), or "
                 "interpolated when the window holds fewer than three refreshes; plus the counter's resolution")
        mode = "counter-window"
    elif estimator == "sum":
        bound, basis = naive_bound(state, va, vb, energy, b - a)
        mode = "polled-window"
    else:
        window = state.power_window(primary)
        part = min(1.0, window / period) if window is not None and math.isfinite(period) else 0.0
        bound = 2 * ((window or p_eff) / 2 + p_eff) / (b - a) + (1 - part) if b > a else NAN
        basis = (f"{primary.name} polled, one window ({estimator}): edges ± (half the averaging window + one "
                 "update) at full power; part-time readings unshifted (aliasing up to the unseen fraction)")
        mode = "polled-window"
    polled = polled_estimate(state, [(handle.anchor, b)]) if state.cross else (NAN, NAN)
    trial = Trial(opened=a, a=a, b=b, runs=1, durations=[b - a], anchor_a=handle.anchor, anchor_b=b,
                  host_a=handle.host, host_b=host_end)
    return build_reading(state, handle.label, mode, [trial], [energy], reason, bound, basis, polled=polled,
                         failed_polls=failed)
