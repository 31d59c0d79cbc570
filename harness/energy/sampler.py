"""The sampler: a thread that polls every channel at a fixed rate (default 50 Hz), keeps only
readings that changed (each is then one sensor update), timestamps them, and keeps running
integrals (:mod:`harness.energy.series`) so that the energy of any window is the difference of two
cumulative values. A window's start is an :class:`Anchor`: its cumulative values are fixed as soon
as readings after it exist, after which the readings around it may be forgotten.

Timestamps: a changed value was refreshed somewhere between the poll that saw it and the
previous successful poll, so it is placed mid-way between them (± half that gap). The sampler
also counts, per channel, polls and sensor refreshes seen or missed (from the gaps between polls
and the channel's update period), so a window can state its achieved poll rate and how many
refreshes it missed (a sampler starved of the GIL polls at 15-28 Hz).

A failed read is a gap, not the end (:class:`GapLog`): it is counted, retried at the next poll,
and costs only the windows whose edges or coverage it touches. Only a fatal error (GPU lost,
driver gone) or failures without a break for ``max_gap_s`` give the channel up. A counter that
goes backwards (reset, or a 32-bit wrap) is logged (:attr:`Sampler.backwards`): windows spanning
it are NaN with the reason.

The clock is injectable: :class:`RealClock` runs a real thread; :class:`~harness.energy.simulated.SimClock`
steps polls in virtual time.
"""
from __future__ import annotations

import bisect
import math
import threading
import time
from dataclasses import dataclass, field

from harness.energy.series import COUNTER, HOLD, LINEAR, SUM, PollStats, Series
from harness.energy.sources import Channel, is_fatal

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

    @staticmethod
    def sleep(seconds: float) -> None:
        """Until ``seconds`` from now; a deadline already past (a loop that overran it on a busy host) returns at once,
        as the simulated clock does."""
        time.sleep(max(0.0, seconds))

    @staticmethod
    def periodic(period_s: float, fn) -> PollingThread:
        thread = PollingThread(period_s, fn)
        thread.start()
        return thread


@dataclass
class Anchor:
    """A point in time whose cumulative values the sampler fixes once readings after it exist."""

    t: float
    values: dict | None = None  # channel → {"series": [per device {estimator: value, "count": (n, Σ, Σ²)}], "polls": (...)}


@dataclass
class GapLog:
    """Failed reads of one channel: each failure's time and message, and the gaps they left
    between successful polls ([last good poll, next good poll]; the end is +inf while failing)."""

    failures: list[tuple[float, str]] = field(default_factory=list)
    gaps: list[list[float]] = field(default_factory=list)
    last_good: float = -math.inf
    streak_start: float | None = None
    total: int = 0

    def failed(self, t: float, message: str) -> None:
        if self.streak_start is None:
            self.streak_start = t
            self.gaps.append([self.last_good, math.inf])
        self.failures.append((t, message))
        self.total += 1

    def note(self, t: float, message: str) -> None:
        """A failed read elsewhere (a refresh watcher's): counted, no gap in the sampler's polling."""
        self.failures.append((t, message))
        self.total += 1

    def succeeded(self, t: float) -> None:
        if self.streak_start is not None:
            self.gaps[-1][1] = t
            self.streak_start = None
        self.last_good = t

    def between(self, a: float, b: float) -> tuple[int, list[tuple[float, float]], str | None]:
        """Failed reads in [a, b], the gaps overlapping it, and the last failure's message."""
        inside = [m for t, m in self.failures if a <= t <= b]
        gaps = [(g0, g1) for g0, g1 in self.gaps if g1 >= a and g0 <= b]
        return len(inside), gaps, inside[-1] if inside else None

    def prune(self, keep: int = 10_000) -> None:
        """Failures are rare and a measurement can outlast the sampler's history: keep the last ``keep``."""
        del self.failures[:-keep]
        del self.gaps[:-keep]


class Sampler:
    """Polls ``channels`` every ``interval_s`` into one :class:`Series` per channel and device."""

    def __init__(self, channels: list[Channel], clock, interval_s: float, skip_unchanged: bool = True,
                 align_timestamps: bool = True, keep_s: float = 10.0, max_gap_s: float = 5.0):
        self.clock, self.interval_s, self.skip_unchanged = clock, interval_s, skip_unchanged
        self.align_timestamps, self.keep_s, self.max_gap_s = align_timestamps, keep_s, max_gap_s
        self.channels = list(channels)
        shift = interval_s / 2 if skip_unchanged and align_timestamps else 0.0
        self.series: dict[str, list[Series]] = {
            c.name: [Series(c.name, c.kind, shift, self._update(c), lin_shift_s=self._lin_shift(c) if align_timestamps
                            else 0.0) for _ in c.handles] for c in channels}
        self.stats = {c.name: PollStats(self._update(c)) for c in channels}
        self.gaps = {c.name: GapLog() for c in channels}
        self.backwards: dict[str, list[tuple[float, float, float]]] = {c.name: [] for c in channels}  # (t, old, new)
        self.lock = threading.RLock()
        self.anchors: list[Anchor] = []
        self.driver = None
        self.polls = 0
        self.extra: list = []  # callables run on every poll (host energy wrap tracking, GPU state)
        self.grids: dict[str, tuple[float, float]] = {}  # channel → device 0's refresh grid (t_ref, period)
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

    def set_grid(self, name: str, t_ref: float, period: float) -> None:
        """Place device 0's refreshes of channel ``name`` on this fitted grid where exactly one grid point
        lies between the two polls around a change (± the grid's fit, not ± half a poll: a 50 Hz sampler
        on a 50 ms sensor under a 10 Hz load otherwise aliases its own timing errors; issue 30)."""
        with self.lock:
            self.grids[name] = (t_ref, period)

    def poll(self) -> None:
        """Read every live channel once. A failing read is logged as a gap; it never raises."""
        self.polls += 1
        for channel in self.channels:
            devices = self.series[channel.name]
            if devices[0].failure is not None:
                continue
            now = self.clock.now()
            try:
                values = channel.read()
            except Exception as e:  # a sampler must outlive any driver error; the windows it touches report it
                self._failed(channel.name, now, e)
                continue
            with self.lock:
                log = self.gaps[channel.name]
                previous = log.last_good
                log.succeeded(now)
                self.stats[channel.name].add(now)
                grid = self.grids.get(channel.name)
                for d, (series, value) in enumerate(zip(devices, values)):
                    self._record(series, now, float(value), previous, grid if d == 0 else None)
        for fn in self.extra:
            fn()
        with self.lock:
            self._resolve()
            now = self.clock.now()
            if now - self._last_prune > 1.0:
                self.prune()

    def _failed(self, name: str, now: float, error: Exception) -> None:
        message = f"{name} read failed: {error or type(error).__name__}"
        with self.lock:
            log = self.gaps[name]
            log.failed(now, message)
            if is_fatal(error) or now - log.streak_start >= self.max_gap_s:
                why = message if is_fatal(error) else f"{message} (failing for {now - log.streak_start:.1f} s)"
                for series in self.series[name]:
                    series.failed_at, series.failure = log.streak_start, why

    def _record(self, series: Series, now: float, value: float, previous: float,
                grid: tuple[float, float] | None = None) -> None:
        series.last_poll = now
        if series.kind == "energy" and series.values and value < series.values[-1]:
            self.backwards[series.name].append((now, series.values[-1], value))
        if self.skip_unchanged:
            if series.initial is None:
                series.initial, series.initial_t = value, now - series.shift_s
                return
            if value == (series.values[-1] if series.values else series.initial):
                return
        t = (previous + now) / 2 if series.shift_s and math.isfinite(previous) else now - series.shift_s
        if grid is not None and series.shift_s and math.isfinite(previous):
            t_k = grid[0] + math.floor((now - grid[0]) / grid[1]) * grid[1]
            if previous < t_k <= now and t_k - grid[1] <= previous:  # the one grid point between the polls
                t = t_k
        series.append(t, value)

    def failure(self, name: str, before: float = math.inf) -> str | None:
        """Why channel ``name`` was given up, if it was before ``before``."""
        s = self.series[name][0]
        if s.failed_at is not None and s.failed_at <= before:
            return f"{s.failure} (from t={s.failed_at:.3f} s)"
        return None

    def glitches(self, name: str, a: float, b: float) -> tuple[int, float, float, str | None]:
        """Failed reads of channel ``name`` in [a, b]: their number, the longest gap between
        successful polls overlapping [a, b], the sensor refreshes those gaps hid (beyond the one
        seen after each), and the last failure's message."""
        with self.lock:
            count, gaps, message = self.gaps[name].between(a, b)
            now = self.clock.now()
            update = self.stats[name].update_s
        lengths = [min(g1, now) - g0 for g0, g1 in gaps if math.isfinite(g0)]
        longest = max(lengths, default=0.0)
        hidden = sum(max(0.0, g / update - 1.0) for g in lengths) if math.isfinite(update) and update > 0 else 0.0
        return count, longest, hidden, message

    def backwards_between(self, name: str, a: float, b: float) -> list[tuple[float, float, float]]:
        """Decreases of counter ``name`` seen in [a, b] (time, value before, value after)."""
        with self.lock:
            return [e for e in self.backwards[name] if a <= e[0] <= b]

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

    def max_poll_gap(self, name: str, since: float) -> float:
        """Longest gap between two polls of channel ``name`` since ``since`` (the sampler's lag)."""
        with self.lock:
            times = self.stats[name].times
            i = max(bisect.bisect_left(times, since) - 1, 0)
            recent = times[i:]
            return max((b - a for a, b in zip(recent, recent[1:])), default=self.interval_s)

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
            for log in self.gaps.values():
                log.prune()
