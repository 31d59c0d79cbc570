"""Idle power tracked through a cell, for net (idle-subtracted) energy.

A single baseline taken when the meter starts goes stale: a GPU's idle power drifts with its
temperature (60→90 W over a cell was observed in simulation of a thermal ramp, putting net
energy off by 21 % on average). So idle is measured again after each measurement — one sensor
update period of idle GPU right after the window's tail, which the meter waits through anyway to
close the window on a refresh — and idle power at any time is the linear interpolation between
the measurements around it (before the first: flat; after the last: the last trend continued for
at most the last spacing, then flat). Net energy of a window subtracts the integral
of that curve over the window, which is exact for a linear drift and off by the curvature
between two measurements otherwise (a few tenths of a watt for a 60→90 W swing over minutes).

Design choice: idle windows *after* each measurement (not before) because the reading is then
bracketed — the previous measurement's idle point lies before it and the new one after it — and
because the tail wait that closes a counter window on a refresh already leaves the GPU idle, so
the extra cost is one update period (100 ms) rather than two.
"""
from __future__ import annotations

import bisect
import math

NAN = math.nan


class IdleTracker:
    """Idle power per device as a function of time, from timed measurements."""

    def __init__(self, devices: int, keep: int = 4096):
        self.devices, self.keep = devices, keep
        self.times: list[float] = []
        self.watts: list[list[float]] = []
        self.last_added = -math.inf

    def add(self, t: float, watts: list[float]) -> None:
        """An idle measurement centred at ``t``, one value per device (NaN where not measured)."""
        if len(watts) != self.devices or not all(math.isfinite(w) for w in watts):
            return
        i = bisect.bisect_right(self.times, t)
        self.times.insert(i, t)
        self.watts.insert(i, list(watts))
        self.last_added = max(self.last_added, t)
        if len(self.times) > self.keep:
            del self.times[0], self.watts[0]

    def __len__(self) -> int:
        return len(self.times)

    def at(self, t: float) -> list[float]:
        """Idle power per device at ``t`` (NaN if nothing was measured)."""
        if not self.times:
            return [NAN] * self.devices
        i = bisect.bisect_right(self.times, t)
        if i == 0:
            return list(self.watts[0])
        if i == len(self.times):
            if len(self.times) < 2:
                return list(self.watts[-1])
            # past the last measurement: continue the last trend, for at most the last spacing
            t0, t1 = self.times[-2], self.times[-1]
            f = min(t - t1, t1 - t0) / (t1 - t0) if t1 > t0 else 0.0
            return [w1 + (w1 - w0) * f for w0, w1 in zip(self.watts[-2], self.watts[-1])]
        t0, t1 = self.times[i - 1], self.times[i]
        f = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        return [w0 + (w1 - w0) * f for w0, w1 in zip(self.watts[i - 1], self.watts[i])]

    def energy(self, a: float, b: float) -> list[float]:
        """∫ idle power over [a, b] per device (exact for the piecewise-linear curve)."""
        if not self.times:
            return [NAN] * self.devices
        knots = [a] + [t for t in self.times if a < t < b] + [b]
        out = [0.0] * self.devices
        prev = self.at(knots[0])
        for t0, t1 in zip(knots, knots[1:]):
            cur = self.at(t1)
            for d in range(self.devices):
                out[d] += (prev[d] + cur[d]) / 2 * (t1 - t0)
            prev = cur
        return out

    def spread(self, a: float, b: float) -> float:
        """How much total idle power varied over the measurements around [a, b] (a few on either
        side; W): the scale of the error of assuming a known idle power at a window's edges."""
        if len(self.times) < 2:
            return NAN
        lo = max(bisect.bisect_right(self.times, a) - 3, 0)
        hi = min(bisect.bisect_left(self.times, b) + 2, len(self.times) - 1)
        totals = [sum(w) for w in self.watts[lo:hi + 1]]
        return max(totals) - min(totals)
