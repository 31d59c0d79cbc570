"""The sampler: a thread that polls every channel at a fixed rate (default 50 Hz), keeps only
readings that changed (each is then one sensor update), and timestamps them.

Timestamps can be aligned with the workload (Yang et al. 2023, good practice 3): a new value
is first seen up to one poll interval after the sensor refreshed it, and a power value is the
average of the ``window_s`` before that refresh, so its time is moved back by half the poll
interval plus half the averaging window. The clock is injectable: :class:`RealClock` runs a
real thread; the simulated clock of the tests steps polls in virtual time.
"""
from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field

from harness.energy.sources import Channel


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


@dataclass
class Series:
    """Readings of one channel on one device: times (aligned), values (W or cumulative J), and a
    failure if any.

    When unchanged readings are skipped, the very first reading is kept apart as ``initial``:
    it was refreshed at an unknown time before polling began, so it is no sensor update.
    """

    name: str
    kind: str
    shift_s: float = 0.0
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    failed_at: float | None = None
    failure: str | None = None
    initial: float | None = None


class Sampler:
    """Polls ``channels`` every ``interval_s`` into one :class:`Series` per channel and device."""

    def __init__(self, channels: list[Channel], clock, interval_s: float, skip_unchanged: bool = True,
                 align_timestamps: bool = True):
        self.clock, self.interval_s, self.skip_unchanged = clock, interval_s, skip_unchanged
        self.channels = list(channels)
        self.series: dict[str, list[Series]] = {
            c.name: [Series(c.name, c.kind, self._shift(c) if align_timestamps else 0.0) for _ in c.handles]
            for c in channels}
        self.lock = threading.Lock()
        self.driver = None
        self.polls = 0

    def _shift(self, channel: Channel) -> float:
        shift = self.interval_s / 2 if self.skip_unchanged else 0.0
        window = channel.semantics.window_s if channel.semantics is not None else None
        return shift + (window / 2 if channel.kind == "power" and window is not None else 0.0)

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
            for series, value in zip(devices, values):
                self._record(series, now, float(value))

    def _record(self, series: Series, now: float, value: float) -> None:
        if self.skip_unchanged:
            if series.initial is None:
                series.initial = value
                return
            if value == (series.values[-1] if series.values else series.initial):
                return
        with self.lock:
            series.times.append(now - series.shift_s)
            series.values.append(value)

    def start(self) -> None:
        if self.driver is None:
            self.poll()
            self.driver = self.clock.periodic(self.interval_s, self.poll)

    def stop(self) -> None:
        if self.driver is not None:
            self.driver.stop()
            self.driver = None

    def snapshot(self, name: str) -> list[Series]:
        """Consistent copies of one channel's series, one per device (the thread keeps appending)."""
        with self.lock:
            return [Series(s.name, s.kind, s.shift_s, list(s.times), list(s.values), s.failed_at, s.failure, s.initial)
                    for s in self.series[name]]

    def latest_time(self, name: str) -> float:
        """Time of the oldest of the devices' latest readings."""
        with self.lock:
            return min(s.times[-1] if s.times else float("-inf") for s in self.series[name])

    def failure(self, name: str) -> str | None:
        return self.series[name][0].failure

    def prune(self, before: float) -> None:
        """Forget samples older than ``before`` (keeping one earlier sample for interpolation)."""
        with self.lock:
            for s in (s for device_series in self.series.values() for s in device_series):
                drop = max(bisect.bisect_left(s.times, before) - 1, 0)
                del s.times[:drop], s.values[:drop]
