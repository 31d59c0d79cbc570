"""Energy of sub-windows (prefill vs decode; draft vs verification vs the rest) from a cumulative
energy counter, given the sub-windows' timestamps.

The counter is exact only at its refreshes (every ~100 ms), while a generation alternates
between drafting and verification every few milliseconds, so energy cannot be read off per
interval. Instead each counter update interval j, with energy ΔE_j, is split by the time
x_jl that label l (e.g. "draft", "verify", "other") occupied in it; the labels' mean powers
P_l solve ΔE_j ≈ Σ_l P_l x_jl by non-negative least squares over all intervals of the window,
and label l's energy is P_l × its total time. This is exact when each label draws a constant
power, and it is what the counter can say otherwise (labels' average powers). The residual and
the number of intervals are returned, so a caller can tell a well-posed split (many intervals,
labels mixed differently across them) from an ill-posed one.

The timestamps must be the device's: host timestamps of asynchronously launched work are only
meaningful with device synchronisation at the boundaries (``runner.breakdown``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls


@dataclass(frozen=True)
class Attribution:
    energy_j: dict[str, float]   # per label
    power_w: dict[str, float]    # per label (fitted mean power)
    seconds: dict[str, float]    # per label (time inside the window)
    intervals: int               # counter intervals used
    residual_j: float            # norm of the misfit over the intervals
    reason: str | None = None


def _overlap(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e in spans)


def attribute(times: list[float], joules: list[float], labels: dict[str, list[tuple[float, float]]],
              window: tuple[float, float] | None = None) -> Attribution:
    """Split counter energy among ``labels`` (label → list of (start, end) spans).

    ``times``/``joules`` are counter refreshes (time, cumulative J) covering the window
    (``window`` defaults to the spans' extent); intervals outside it are ignored, and the time
    of each interval not covered by any label is attributed to an implicit label "other"."""
    spans = {k: sorted(v) for k, v in labels.items() if v}
    if window is None:
        window = (min(s for v in spans.values() for s, _ in v), max(e for v in spans.values() for _, e in v))
    a, b = window
    pts = [(t, j) for t, j in zip(times, joules) if a - 1e-12 <= t <= b + 1e-12]
    names = list(spans) + ["other"]
    empty = {n: math.nan for n in names}
    if len(pts) < 2:
        return Attribution(empty, empty, empty, 0, math.nan,
                           "fewer than two counter refreshes inside the window: nothing to split")
    rows, rhs = [], []
    for (t0, e0), (t1, e1) in zip(pts, pts[1:]):
        row = [_overlap(t0, t1, spans[n]) for n in spans]
        row.append(max(0.0, (t1 - t0) - sum(row)))
        rows.append(row)
        rhs.append(e1 - e0)
    x, residual = nnls(np.array(rows), np.array(rhs))
    total_s = {n: (_overlap(a, b, spans[n]) if n in spans else 0.0) for n in names}
    total_s["other"] = max(0.0, (b - a) - sum(total_s[n] for n in spans))
    used = np.array(rows).sum(axis=0)
    power = {n: (float(p) if used[i] > 0 else math.nan) for i, (n, p) in enumerate(zip(names, x))}
    energy = {n: power[n] * total_s[n] if total_s[n] > 0 else 0.0 for n in names}
    reason = None
    if any(math.isnan(power[n]) and total_s[n] > 0 for n in names):
        reason = "a label has time in the window but none between counter refreshes"
    return Attribution(energy, power, total_s, len(rows), float(residual), reason)
