"""Counter vs polled power: the second opinion on every counter reading, and which source the
evidence points at when they disagree.

The polled estimate integrates the power readings over the same windows (trapezoid), with its own
bound (the readings' sampling noise over the unseen part of each update, and the edges). A
disagreement beyond ``cross_check_tolerance`` and that bound is flagged, and the evidence weighed:

* the power readings right after work are above the counter's idle but agree with it once a 1 s
  window would have emptied: the power reading **averages longer than the window in use** — its
  readings after work still hold the work (``suspect: window``; issue 30);
* they disagree **at idle too** (the post-work idle from the counter vs the power readings over the
  same stretch, and later): one of them is mis-scaled — either may be (``suspect: either``);
* they agree at idle and the power reading is **part-time** (averaging window shorter than its
  update period): a single polled window aliases a load periodic near the refresh rate, while the
  counter sees all of it (``suspect: polled``);
* they agree at idle and the power reading sees the whole run: the counter (``suspect: counter``).
"""
from __future__ import annotations

import math

from harness.energy.hardware import unevenness

NAN = math.nan


def polled_estimate(state, spans) -> tuple[float, float]:
    """Polled (trapezoid) energy over ``spans`` [(anchor_a, b)], and that estimate's own bound;
    NaN where a failed poll hid a refresh of the power reading inside a span."""
    power = state.cross
    if power is None:
        return NAN, NAN
    total, n, s1, s2, seconds = 0.0, 0, 0.0, 0.0, 0.0
    for anchor, b in spans:
        if state.trouble(power, anchor.t, b, hidden_ok=False)[0] is not None:
            return NAN, NAN
        va, vb = state.values(anchor, power), state.values(b, power)
        for x, y in zip(va, vb):
            total += y["linear"] - x["linear"]
            n += y["count"][0] - x["count"][0]
            s1 += y["count"][1] - x["count"][1]
            s2 += y["count"][2] - x["count"][2]
        seconds += b - anchor.t
    period, window = state.update_period(power), state.power_window(power)
    part = min(1.0, window / period) if window is not None and math.isfinite(period) else 0.0
    mean_r = s1 / n if n else NAN
    cv = math.sqrt(max(s2 / n - mean_r ** 2, 0.0)) / mean_r if n > 1 and mean_r > 0 else 0.0
    mean_w = total / seconds if seconds > 0 else NAN
    idle = sum(state.idle.edge_at((spans[0][0].t + spans[-1][1]) / 2))
    dynamic = max(mean_w - idle, 0.0) / mean_w if math.isfinite(idle) and mean_w > 0 else 1.0
    edges = 2 * len(spans) * ((window or period) / 2 + (period if math.isfinite(period) else 0.1)) / seconds
    uneven = unevenness(window, period) if window is not None else 1 - part
    bound = 2 * cv * math.sqrt(uneven / max(n / max(state.devices, 1), 1)) + edges * dynamic
    return total, bound


def _idle_ratio(state, delay_s: float = 0.0) -> float:
    """Polled ÷ counter idle over the latest post-work idle measurement: the power readings whose
    averaging window lies wholly after that measurement began (``delay_s`` later still; NaN where
    there is none)."""
    power = state.cross
    if power is None or not len(state.idle.post):
        return NAN
    t = state.idle.post.times[-1]
    counter_w = sum(state.idle.post.watts[-1])
    period = state.update_period(state.primary)
    watts = sum(state.readings_after(power, t - (period if math.isfinite(period) else 0.1) / 2 + delay_s))
    return watts / counter_w if counter_w > 0 and math.isfinite(watts) else NAN


def _decaying(state, tolerance: float, work_end: float) -> bool:
    """Whether the power readings whose averaging window (as believed) lies after the work still fall
    (the work leaving a longer window) rather than sit at a level (a scale disagreement)."""
    if not math.isfinite(work_end):
        return False
    window = state.power_window(state.cross) or 0.0
    snap = state.sampler.snapshot(state.cross.name)[0]
    values = [v for ti, v in zip(snap.times, snap.values) if ti - window >= work_end]  # idle, were the window right
    return len(values) >= 2 and values[0] > values[-1] * (1 + tolerance / 2)


LONGEST_WINDOW_S = 1.0  # the longest averaging window a power reading is known to have (power.draw: 1 s)


def verdict(state, counter_j: float, polled_j: float, polled_bound: float, work_end: float = NAN) -> dict:
    """``cross_check_*`` record fields: the difference, whether it is flagged, and which source the
    evidence points at (with the evidence in words)."""
    diff = (polled_j - counter_j) / counter_j if math.isfinite(polled_j) and math.isfinite(counter_j) and counter_j \
        else NAN
    if math.isnan(diff):
        return {"cross_check_diff": NAN, "cross_check_flag": None}
    tolerance = state.cfg.cross_check_tolerance
    if abs(diff) <= max(tolerance, polled_bound):
        return {"cross_check_diff": diff, "cross_check_flag": False}
    power, sensor = state.cross, state.sensors[state.primary.name]
    ratio = _idle_ratio(state)
    period, window = state.update_period(power), state.power_window(power)
    lag = (f"; the counter was seen lagging (≥ {sensor.lag_lo * 1e3:.0f} ms, corrected at the edges)"
           if sensor.lag_lo > 0 else "")
    late, sem = _idle_ratio(state, LONGEST_WINDOW_S), power.semantics
    late = late if math.isfinite(late) else getattr(state, "cross_idle_ratio", NAN)
    if math.isfinite(ratio) and ratio - 1 > tolerance / 2 and abs(late - 1) <= tolerance / 2 and \
            _decaying(state, tolerance, work_end):
        # above the counter right after work, in agreement at settled idle: the window holds the work
        shown = f"{window * 1e3:.0f} ms" if window is not None else "an unknown window"
        seen = f"but agreed at settled idle ({late:.3f})"
        suspect, evidence = "window", (
            f"{power.name} still held the work right after it (polled ÷ counter idle {ratio:.3f}) {seen}: its "
            f"averaging window is likely longer than the {shown} in use ({sem.provenance if sem is not None else ''})"
            "; measure it with harness-gpu-check before suspecting a mis-scaled source")
    elif math.isfinite(ratio) and abs(ratio - 1) > tolerance / 2:
        suspect, evidence = "either", (f"they disagree at idle too (polled ÷ counter {ratio:.3f}): one of them is "
                                       "mis-scaled, which one needs an external meter")
    elif window is None or not math.isfinite(period) or window < period:
        shown = f"{window * 1e3:.0f} ms of every {period * 1e3:.0f} ms" if window is not None and \
            math.isfinite(period) else "an unknown part of each update"
        suspect, evidence = "polled", (f"they agree at idle and differ only under load: {power.name} sees {shown}, so "
                                       "a load periodic near its refresh rate aliases in one polled window")
    else:
        suspect, evidence = "counter", (f"they agree at idle and {power.name} averages all of the run "
                                        f"(window {window:g} s ≥ update {period:g} s)")
    return {"cross_check_diff": diff, "cross_check_flag": True, "cross_check_suspect": suspect,
            "cross_check_evidence": evidence + lag}
