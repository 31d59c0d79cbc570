"""One channel's readings on one device, with the running integrals the estimators use
(:class:`Series`), and the poll bookkeeping of a channel (:class:`PollStats`).

A window's energy is the difference of two cumulative values, so reading cost does not grow
with a window's length: each series keeps the last ``keep_s`` seconds of readings and, per
reading, the cumulative integrals (zero-order hold, linear interpolation, plain sum, reading
count, sum of squares). Timestamps are refresh instants: a changed value is placed mid-way
between the poll that saw it and the poll before (the sampler does this), and for LINEAR half
the sensor's averaging window back.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

NAN = math.nan

# estimators a Series can evaluate (see harness.energy.windows for what each means)
HOLD, LINEAR, SUM, COUNTER = "hold", "linear", "sum", "counter"


@dataclass
class Series:
    """Readings of one channel on one device, with running integrals.

    ``times`` are refresh instants (first seen − half a poll interval); ``values`` W or
    cumulative J. For power, the running integrals at each reading are: ``c_hold`` (each value
    held until the next), ``c_lin`` (linear interpolation, with a hold point inserted where a
    gap longer than 1.5 update periods shows the value stayed put), ``c_sum`` (Σ values: the
    seeds' sum), ``c_sq`` (Σ values²) and ``c_n`` (number of real readings). When unchanged
    readings are skipped, the first reading is ``initial``: it was refreshed at an unknown time
    before polling began, so it counts as no sensor update; for power it is held from the first
    poll (``initial_t``), which is the origin of the running integrals.
    """

    name: str
    kind: str
    shift_s: float = 0.0
    update_s: float = NAN
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    c_hold: list[float] = field(default_factory=list)
    c_lin: list[float] = field(default_factory=list)
    c_sum: list[float] = field(default_factory=list)
    c_sq: list[float] = field(default_factory=list)
    c_n: list[int] = field(default_factory=list)
    real: list[bool] = field(default_factory=list)
    failed_at: float | None = None
    failure: str | None = None
    initial: float | None = None
    initial_t: float = NAN
    last_poll: float = -math.inf
    lin_shift_s: float = 0.0  # LINEAR is evaluated this much later: a reading sits mid-way in its averaging window

    # ---- building --------------------------------------------------------------------------
    def _push(self, t: float, v: float, real: bool) -> None:
        if self.times:
            t = max(t, self.times[-1])  # monotone (alignment shifts can cross after a stall)
            dt, v0 = t - self.times[-1], self.values[-1]
            self.c_hold.append(self.c_hold[-1] + v0 * dt)
            self.c_lin.append(self.c_lin[-1] + (v0 + v) / 2 * dt)
            self.c_sum.append(self.c_sum[-1] + (v if real else 0.0))
            self.c_sq.append(self.c_sq[-1] + (v * v if real else 0.0))
            self.c_n.append(self.c_n[-1] + (1 if real else 0))
        else:
            base = self._initial_energy(t)
            self.c_hold.append(base)
            self.c_lin.append(base)
            self.c_sum.append(v if real else 0.0)
            self.c_sq.append(v * v if real else 0.0)
            self.c_n.append(1 if real else 0)
        self.times.append(t)
        self.values.append(v)
        self.real.append(real)

    def _initial_energy(self, t: float) -> float:
        """Energy of the initial reading held from ``initial_t`` to ``t`` (0 without one)."""
        if self.kind == "power" and self.initial is not None and math.isfinite(self.initial_t):
            return self.initial * (t - self.initial_t)
        return 0.0

    def append(self, t: float, v: float, real: bool = True) -> None:
        """Add a reading at (aligned) time ``t``; for power, first a hold point if the gap shows
        the sensor kept reporting the previous value."""
        if (self.kind == "power" and self.times and math.isfinite(self.update_s)
                and t - self.times[-1] > 1.5 * self.update_s):
            self._push(t - self.update_s, self.values[-1], real=False)
        self._push(t, v, real)

    def prune(self, before: float) -> None:
        """Forget readings older than ``before``, keeping one earlier reading for interpolation."""
        drop = max(bisect.bisect_left(self.times, before) - 1, 0)
        if drop:
            for lst in (self.times, self.values, self.c_hold, self.c_lin, self.c_sum, self.c_sq, self.c_n, self.real):
                del lst[:drop]

    # ---- evaluating ------------------------------------------------------------------------
    def _index(self, t: float) -> int:
        return bisect.bisect_right(self.times, t) - 1

    def cumulative(self, t: float, estimator: str) -> float:
        """The running integral of ``estimator`` at ``t`` (J; for SUM, Σ values of readings ≤ t;
        for COUNTER, the counter interpolated at ``t``, NaN outside the readings)."""
        ts, vs = self.times, self.values
        if estimator == LINEAR:
            t += self.lin_shift_s
        if not ts:
            if estimator in (HOLD, LINEAR) and self.kind == "power" and self.initial is not None:
                return self._initial_energy(t)
            return 0.0 if estimator == SUM and self.initial is not None else NAN
        i = self._index(t)
        if estimator == COUNTER:
            if i < 0 or t > ts[-1]:
                return NAN
            if i == len(ts) - 1:
                return vs[i]
            return vs[i] + (vs[i + 1] - vs[i]) * (t - ts[i]) / (ts[i + 1] - ts[i])
        if estimator == SUM:
            return self.c_sum[i] if i >= 0 else self.c_sum[0] - (vs[0] if self.real[0] else 0.0)
        if i < 0:  # before the first reading: the initial reading (else the first) held back
            base = self.c_hold[0] if estimator == HOLD else self.c_lin[0]
            back = self.initial if self.kind == "power" and self.initial is not None else vs[0]
            return base - back * (ts[0] - t)
        if estimator == HOLD:
            return self.c_hold[i] + vs[i] * (t - ts[i])
        if i == len(ts) - 1:
            return self.c_lin[i] + vs[i] * (t - ts[i])
        vt = vs[i] + (vs[i + 1] - vs[i]) * (t - ts[i]) / (ts[i + 1] - ts[i])
        return self.c_lin[i] + (vs[i] + vt) / 2 * (t - ts[i])

    def neighbours(self, t: float) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
        """The last two readings at or before ``t`` and the first two after it, as (time, value)."""
        i = self._index(t)
        before = [(self.times[j], self.values[j]) for j in range(max(i - 1, 0), i + 1) if j >= 0]
        after = [(self.times[j], self.values[j]) for j in range(i + 1, min(i + 3, len(self.times)))]
        return before, after

    def count(self, t: float) -> tuple[int, float, float]:
        """(real readings, Σ values, Σ values²) up to ``t`` (cumulative; differences give a window's)."""
        i = self._index(t)
        if i < 0:
            if not self.times:
                return 0, 0.0, 0.0
            first = 1 if self.real[0] else 0
            return self.c_n[0] - first, self.c_sum[0] - (self.values[0] if first else 0.0), \
                self.c_sq[0] - (self.values[0] ** 2 if first else 0.0)
        return self.c_n[i], self.c_sum[i], self.c_sq[i]

    def settled(self, t: float, after: int = 1) -> bool:
        """Whether the running integrals at ``t`` are final: a reading after ``t`` exists, or polls
        went on unchanged for 1.5 update periods past ``t`` (a later change then gets a hold point
        after ``t``). For a counter, ``after`` readings past ``t`` (an anchor keeps two: a window's
        start may be extrapolated from the two refreshes after it)."""
        if self.failure is not None:
            return True
        t += self.lin_shift_s
        if self.kind == "energy":
            return len(self.times) >= after and self.times[-after] > t
        if self.times and self.times[-1] > t:
            return True
        wait = 1.5 * self.update_s if math.isfinite(self.update_s) else 0.2
        return self.last_poll - self.shift_s > t + wait

    def snapshot(self) -> "Series":
        return Series(self.name, self.kind, self.shift_s, self.update_s, list(self.times), list(self.values),
                      list(self.c_hold), list(self.c_lin), list(self.c_sum), list(self.c_sq), list(self.c_n),
                      list(self.real), self.failed_at, self.failure, self.initial, self.initial_t, self.last_poll,
                      self.lin_shift_s)

    # convenience for interval estimates over retained readings
    def energy(self, a: float, b: float, estimator: str) -> float:
        return self.cumulative(b, estimator) - self.cumulative(a, estimator)


@dataclass
class PollStats:
    """Cumulative poll bookkeeping of one channel: polls, and sensor refreshes seen or missed,
    inferred from the gaps between polls and the update period (a gap g sees min(g/P, 1)
    refreshes and misses max(g/P − 1, 0))."""

    update_s: float = NAN
    times: list[float] = field(default_factory=list)
    polls: list[int] = field(default_factory=list)
    seen: list[float] = field(default_factory=list)
    missed: list[float] = field(default_factory=list)

    def add(self, t: float) -> None:
        if self.times:
            gap = t - self.times[-1]
            ratio = gap / self.update_s if math.isfinite(self.update_s) and self.update_s > 0 else 0.0
            self.polls.append(self.polls[-1] + 1)
            self.seen.append(self.seen[-1] + min(ratio, 1.0))
            self.missed.append(self.missed[-1] + max(ratio - 1.0, 0.0))
        else:
            self.polls.append(1)
            self.seen.append(0.0)
            self.missed.append(0.0)
        self.times.append(t)

    def at(self, t: float) -> tuple[int, float, float]:
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0:
            return 0, 0.0, 0.0
        return self.polls[i], self.seen[i], self.missed[i]

    def prune(self, before: float) -> None:
        drop = max(bisect.bisect_left(self.times, before) - 1, 0)
        if drop:
            for lst in (self.times, self.polls, self.seen, self.missed):
                del lst[:drop]


