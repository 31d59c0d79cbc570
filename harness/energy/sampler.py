"""The sampler: a thread that polls every channel at a fixed rate (default 50 Hz), keeps only
readings that changed (each is then one sensor update), timestamps them, and keeps running
integrals so that the energy of any window is the difference of two cumulative values.

Reading cost does not grow with a window's length: each :class:`Series` keeps the last
``keep_s`` seconds of readings and, per reading, the cumulative integrals the estimators use
(zero-order hold, linear interpolation, plain sum, reading count, sum of squares). A window's
start is an :class:`Anchor`: its cumulative values are fixed as soon as readings after it exist,
after which the readings around it may be forgotten. A cell-long window therefore holds a few
numbers, not every sample of the cell.

Timestamps: a changed value is first seen up to one poll interval after the sensor refreshed
it, so it is placed half a poll interval back (the refresh instant, ±half an interval). The
estimators of :mod:`harness.energy.windows` add the averaging-window alignment where they need
it. The sampler also counts, per channel, polls and sensor refreshes seen or missed (from the
gaps between polls and the channel's update period), so a window can state its achieved poll
rate and how many refreshes it missed (a sampler starved of the GIL polls at 15-28 Hz).
The clock is injectable: :class:`RealClock` runs a real thread; :class:`~harness.energy.simulated.SimClock`
steps polls in virtual time.
"""
from __future__ import annotations

import bisect
import math
import threading
import time
from dataclasses import dataclass, field

from harness.energy.sources import Channel

NAN = math.nan


class PollingThread(threading.Thread):
    """Calls ``fn`` every ``period_s`` until :meth:`stop`; late ticks are dropped, not bunched."""

    def __init__(self, period_s: float, fn):
        super().__init__(name="harness-energy-sampler", daemon=True)
        self.period_s, self.fn = period_s, fn
        self.halt = threading.Event()

    def run(self) -> None:
        due = time.perf_counter()
        while not self.halt.is_set():
            self.fn()
            due += self.period_s
            now = time.perf_counter()
            if due < now:
                due = now + self.period_s
            self.halt.wait(due - now)

    def stop(self) -> None:
        self.halt.set()
        self.join()


class RealClock:
    """Wall-clock time for real measurements."""

    now = staticmethod(time.perf_counter)
    sleep = staticmethod(time.sleep)

    @staticmethod
    def periodic(period_s: float, fn) -> PollingThread:
        thread = PollingThread(period_s, fn)
        thread.start()
        return thread


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


@dataclass
class Anchor:
    """A point in time whose cumulative values the sampler fixes once readings after it exist."""

    t: float
    values: dict | None = None  # channel → {"series": [per device {estimator: value, "count": (n, Σ, Σ²)}], "polls": (...)}


class Sampler:
    """Polls ``channels`` every ``interval_s`` into one :class:`Series` per channel and device."""

    def __init__(self, channels: list[Channel], clock, interval_s: float, skip_unchanged: bool = True,
                 align_timestamps: bool = True, keep_s: float = 10.0):
        self.clock, self.interval_s, self.skip_unchanged = clock, interval_s, skip_unchanged
        self.align_timestamps, self.keep_s = align_timestamps, keep_s
        self.channels = list(channels)
        shift = interval_s / 2 if skip_unchanged and align_timestamps else 0.0
        self.series: dict[str, list[Series]] = {
            c.name: [Series(c.name, c.kind, shift, self._update(c), lin_shift_s=self._lin_shift(c) if align_timestamps
                            else 0.0) for _ in c.handles] for c in channels}
        self.stats = {c.name: PollStats(self._update(c)) for c in channels}
        self.lock = threading.RLock()
        self.anchors: list[Anchor] = []
        self.driver = None
        self.polls = 0
        self.extra: list = []  # callables run on every poll (e.g. host energy wrap tracking)
        self._last_prune = -math.inf

    @staticmethod
    def _update(channel: Channel) -> float:
        sem = channel.semantics
        return sem.update_s if sem is not None and sem.update_s is not None else NAN

    @staticmethod
    def _lin_shift(channel: Channel) -> float:
        sem = channel.semantics
        window = sem.window_s if sem is not None and sem.window_s is not None else None
        return window / 2 if channel.kind == "power" and window is not None else 0.0

    def set_update_period(self, name: str, update_s: float) -> None:
        """Use ``update_s`` (inferred) for hold points and refresh counting of channel ``name``."""
        if not math.isfinite(update_s):
            return
        with self.lock:
            for s in self.series[name]:
                s.update_s = update_s
            self.stats[name].update_s = update_s

    def poll(self) -> None:
        """Read every live channel once. A failing read marks its series failed; it never raises."""
        self.polls += 1
        for channel in self.channels:
            devices = self.series[channel.name]
            if devices[0].failure is not None:
                continue
            now = self.clock.now()
            try:
                values = channel.read()
            except Exception as e:  # a sampler must outlive any driver error; the window reports it
                with self.lock:
                    for series in devices:
                        series.failed_at, series.failure = now, f"{channel.name} read failed: {e or type(e).__name__}"
                continue
            with self.lock:
                self.stats[channel.name].add(now)
                for series, value in zip(devices, values):
                    self._record(series, now, float(value))
        for fn in self.extra:
            fn()
        with self.lock:
            self._resolve()
            now = self.clock.now()
            if now - self._last_prune > 1.0:
                self.prune()

    def _record(self, series: Series, now: float, value: float) -> None:
        series.last_poll = now
        if self.skip_unchanged:
            if series.initial is None:
                series.initial, series.initial_t = value, now - series.shift_s
                return
            if value == (series.values[-1] if series.values else series.initial):
                return
        series.append(now - series.shift_s, value)

    # ---- anchors ---------------------------------------------------------------------------
    def anchor(self, t: float) -> Anchor:
        """Register ``t``; its cumulative values are fixed as soon as they are final."""
        a = Anchor(t)
        with self.lock:
            bisect.insort(self.anchors, a, key=lambda x: x.t)
            self._resolve()
        return a

    def settled(self, t: float, names: list[str] | None = None) -> bool:
        """Whether the integrals at ``t`` of every live series (of channels ``names``) are final."""
        with self.lock:
            return all(s.settled(t) for name, devices in self.series.items() if names is None or name in names
                       for s in devices)

    def _values(self, t: float) -> dict:
        out = {}
        for name, devices in self.series.items():
            out[name] = {"series": [{HOLD: s.cumulative(t, HOLD), LINEAR: s.cumulative(t, LINEAR),
                                     SUM: s.cumulative(t, SUM), COUNTER: s.cumulative(t, COUNTER),
                                     "count": s.count(t), "around": s.neighbours(t)} for s in devices],
                         "polls": self.stats[name].at(t)}
        return out

    def _resolve(self) -> None:
        while self.anchors and self._settled_all(self.anchors[0].t):
            a = self.anchors.pop(0)
            a.values = self._values(a.t)

    def _settled_all(self, t: float) -> bool:
        return all(s.settled(t, after=2) for devices in self.series.values() for s in devices)

    def values(self, anchor: Anchor | float) -> dict:
        """Cumulative values at an anchor (fixed if resolved, else as they stand now) or a time."""
        with self.lock:
            if isinstance(anchor, Anchor):
                return anchor.values if anchor.values is not None else self._values(anchor.t)
            return self._values(anchor)

    def release(self, anchor: Anchor) -> None:
        with self.lock:
            if anchor in self.anchors:
                self.anchors.remove(anchor)

    # ---- lifetime ----------------------------------------------------------------------------
    def start(self) -> None:
        if self.driver is None:
            self.poll()
            self.driver = self.clock.periodic(self.interval_s, self.poll)

    def stop(self) -> None:
        if self.driver is not None:
            self.driver.stop()
            self.driver = None

    def snapshot(self, name: str) -> list[Series]:
        """Consistent copies of one channel's retained series, one per device."""
        with self.lock:
            return [s.snapshot() for s in self.series[name]]

    def latest_time(self, name: str) -> float:
        """Time of the oldest of the devices' latest readings."""
        with self.lock:
            return min(s.times[-1] if s.times else float("-inf") for s in self.series[name])

    def max_poll_gap(self, name: str, since: float) -> float:
        """Longest gap between two polls of channel ``name`` since ``since`` (the sampler's lag)."""
        with self.lock:
            times = self.stats[name].times
            i = max(bisect.bisect_left(times, since) - 1, 0)
            recent = times[i:]
            return max((b - a for a, b in zip(recent, recent[1:])), default=self.interval_s)

    def failure(self, name: str) -> str | None:
        return self.series[name][0].failure

    def retained(self) -> int:
        """Readings held in memory over all series (bounded by ``keep_s``, whatever the windows)."""
        with self.lock:
            return sum(len(s.times) for devices in self.series.values() for s in devices)

    def prune(self, before: float | None = None) -> None:
        """Forget readings older than ``keep_s`` (or ``before``), except those an unresolved
        anchor still needs."""
        with self.lock:
            now = self.clock.now()
            self._last_prune = now
            horizon = now - self.keep_s if before is None else before
            if self.anchors:
                horizon = min(horizon, self.anchors[0].t - 2.0)
            for devices in self.series.values():
                for s in devices:
                    s.prune(horizon)
            for stats in self.stats.values():
                stats.prune(horizon)
