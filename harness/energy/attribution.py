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


MAX_CONDITION = 20  # of the column-normalised design matrix: beyond this the labels' powers are not identifiable


@dataclass(frozen=True)
class Attribution:
    energy_j: dict[str, float]   # per label
    power_w: dict[str, float]    # per label (fitted mean power)
    seconds: dict[str, float]    # per label (time inside the window)
    intervals: int               # counter intervals used
    residual_j: float            # norm of the misfit over the intervals
    reason: str | None = None
    condition: float = math.nan  # of the column-normalised design: how separable the labels are (1 = fully)
    energy_sigma_j: dict[str, float] | None = None  # per label: standard error from the fit's residual


def _overlap(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, e) - max(a, s)) for s, e in spans)


def attribute(times: list[float], joules: list[float], labels: dict[str, list[tuple[float, float]]],
              window: tuple[float, float] | None = None, outside_w: float | None = None) -> Attribution:
    """Split counter energy among ``labels`` (label → list of (start, end) spans) inside ``window``.

    ``times``/``joules`` are counter refreshes (time, cumulative J) around the window (``window``
    defaults to the spans' extent). The intervals straddling the window's edges are used too, so
    energy right at the edges (a prefill) is not lost; their time outside the window draws
    ``outside_w`` (e.g. the tracked idle power, when the GPU idles around the window) or, if None,
    a fitted label "outside". Time inside the window not covered by any label is attributed to an
    implicit label "other"."""
    spans = {k: sorted(v) for k, v in labels.items() if v}
    if window is None:
        window = (min(s for v in spans.values() for s, _ in v), max(e for v in spans.values() for _, e in v))
    a, b = window
    first = max((i for i, t in enumerate(times) if t <= a), default=0)
    last = min((i for i, t in enumerate(times) if t >= b), default=len(times) - 1)
    pts = list(zip(times[first:last + 1], joules[first:last + 1]))
    names = list(spans) + ["other", "outside"]
    empty = {n: math.nan for n in names}
    if len(pts) < 2:
        return Attribution(empty, empty, empty, 0, math.nan,
                           "fewer than two counter refreshes around the window: nothing to split")
    rows, rhs = [], []
    for (t0, e0), (t1, e1) in zip(pts, pts[1:]):
        row = [_overlap(t0, t1, spans[n]) for n in spans]
        inside = max(0.0, min(t1, b) - max(t0, a))
        row.append(max(0.0, inside - sum(row)))
        outside = (t1 - t0) - inside
        row.append(0.0 if outside_w is not None else outside)
        rows.append(row)
        rhs.append(e1 - e0 - (outside_w * outside if outside_w is not None else 0.0))
    x, residual = nnls(np.array(rows), np.array(rhs))
    total_s = {n: _overlap(a, b, spans[n]) for n in spans}
    total_s["other"] = max(0.0, (b - a) - sum(total_s.values()))
    total_s["outside"] = 0.0
    used = np.array(rows).sum(axis=0)
    power = {n: (float(p) if used[i] > 0 else math.nan) for i, (n, p) in enumerate(zip(names, x))}
    if outside_w is not None:
        power["outside"] = outside_w
    energy = {n: power[n] * total_s[n] if total_s[n] > 0 else 0.0 for n in names}
    reason, condition, sigma = None, math.nan, None
    if any(math.isnan(power[n]) and total_s[n] > 0 for n in names):
        reason = "a label has time in the window but none between counter refreshes"
    else:
        design = np.array(rows)[:, used > 0]
        norms = np.linalg.norm(design, axis=0)
        singular = np.linalg.svd(design / norms, compute_uv=False)
        condition = singular[0] / singular[-1] if singular[-1] > 0 else math.inf
        m, k = design.shape
        if m > k:
            scale = residual ** 2 / (m - k)
            cov = scale * np.linalg.pinv(design.T @ design)
            fitted = [n for i, n in enumerate(names) if used[i] > 0]
            sigma = {n: float(math.sqrt(max(cov[j, j], 0.0)) * total_s[n]) for j, n in enumerate(fitted)}
        if condition > MAX_CONDITION:
            reason = (f"labels are mixed too evenly across the counter's intervals to be told apart (condition "
                      f"number {condition:.0f} > {MAX_CONDITION}); the split is not determined")
    return Attribution(energy, power, total_s, len(rows), float(residual), reason, float(condition), sigma)


def _snap(state, channel, times: list[float]) -> list[float]:
    """The sampler's timestamps of device 0's refreshes (± half a poll) moved onto the refresh grid
    the meter's own 1 ms polling located (± microseconds once the period is refined; not for a
    jittered sensor, whose refreshes are off the grid)."""
    grid = state.sensors[channel.name].grid()
    interval = state.cfg.interval_s
    if grid.points < 3 or not math.isfinite(grid.period) or grid.jitter > interval / 8:
        return list(times)
    out = []
    for t in times:
        n = round((t - grid.t_ref) / grid.period)
        on_grid = grid.t_ref + n * grid.period
        ok = abs(n) * grid.sigma + grid.ref_sigma < interval / 4 and abs(t - on_grid) <= interval
        out.append(on_grid if ok else t)
    return out


def split_counter(state, a: float, b: float, labels: dict[str, list[tuple[float, float]]],
                  idle_around: bool = True) -> Attribution:
    """Split a meter's counter energy of [a, b] (recent: within ``keep_samples_s``) among ``labels``,
    summed over devices. ``idle_around``: the GPU idled just before ``a`` and after ``b`` (as around a
    measurement's windows), at the tracked post-work idle."""
    parts = []
    idle = state.idle.edge_at((a + b) / 2)
    for d, s in enumerate(state.sampler.snapshot(state.primary.name)):
        times = _snap(state, state.primary, s.times) if d == 0 else s.times
        outside = idle[d] if idle_around and math.isfinite(idle[d]) else None
        parts.append(attribute(times, s.values, labels, (a, b), outside))
    names = list(parts[0].energy_j)
    return Attribution({n: sum(p.energy_j[n] for p in parts) for n in names},
                       {n: sum(p.power_w[n] for p in parts) for n in names}, parts[0].seconds,
                       min(p.intervals for p in parts), sum(p.residual_j for p in parts),
                       next((p.reason for p in parts if p.reason), None), max(p.condition for p in parts),
                       None if any(p.energy_sigma_j is None for p in parts) else
                       {n: math.sqrt(sum(p.energy_sigma_j.get(n, 0.0) ** 2 for p in parts))
                        for n in parts[0].energy_sigma_j})
