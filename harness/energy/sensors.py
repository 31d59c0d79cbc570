"""What the meter knows about each sensor, measured on the machine: update period, refresh grid and
jitter, counter resolution and counter lag.

At start-up (:func:`characterize`) every channel is polled every millisecond for
``infer_update_period_s`` (longer, up to five times, until three refreshes were seen: a counter
refreshed once a second is then still characterised): the median time between value changes is
the update period, the changes themselves seed the refresh grid (:func:`harness.energy.phases.fit_grid`,
whose residuals are the jitter), and a counter's increments give its resolution (their greatest
common divisor in mJ, the unit NVML counts in). The counter's lag — how long after the GPU
draws energy the counter shows it — cannot be seen at idle; each counter window's tail narrows it
down (:meth:`Sensor.lag_seen`: was the first refresh after the window's end already caught up?),
and ``harness-gpu-check`` measures it on a known step of load.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from functools import reduce

from harness.energy.phases import Grid, Refresh, fit_grid

NAN = math.nan
KEEP_REFRESHES = 256


@dataclass
class Sensor:
    """One channel's refresh behaviour as measured (device 0 for timing; all devices for resolution)."""

    name: str
    kind: str
    documented_update_s: float | None = None
    inferred_update_s: float = NAN
    refreshes: list[Refresh] = field(default_factory=list)
    resolution_j: float = NAN          # counter: the smallest step it moves in
    resolution_note: str = "not measured"
    lag_lo: float = 0.0                # counter: the lag is above this (a tail refresh this soon was behind) ...
    lag_hi: float = math.inf           # ... and at most this (a tail refresh this soon had caught up)
    lag_tests: int = 0
    rise_hi: float = math.inf          # counter: the lag is below this, seen where only work raises the power
    tails_blind: bool = False          # counter: the idle steps down after work, which a tail takes for lag
    lag_floor: float = 0.0             # counter: the lag is above this whatever the tails say (a sensor profile)
    device_update_s: list[float] = field(default_factory=list)  # every device's inferred update period
    increments_mj: set[int] = field(default_factory=set)  # counter: distinct positive increments seen (for the gcd)
    _grid: tuple[int, Grid] | None = None

    def update_period(self) -> float:
        """Inferred, else documented, else the median spacing of refreshes seen since, else NaN."""
        if math.isfinite(self.inferred_update_s):
            return self.inferred_update_s
        if self.documented_update_s is not None:
            return self.documented_update_s
        seen = sorted(r.t for r in self.refreshes)
        spacings = [b - a for a, b in zip(seen, seen[1:]) if 0 < b - a < 2.0]
        return statistics.median(spacings) if spacings else NAN

    def see_increments(self, increments_mj: list[int]) -> None:
        """Refine a counter's resolution with increments seen while measuring: at idle every increment may
        be the same (one update's idle energy: the resolution then only bounded by it); under load they
        differ, and their gcd is the step."""
        new = {i for i in increments_mj if i > 0} - self.increments_mj
        if not new:
            return
        divisor = reduce(math.gcd, self.increments_mj | new)
        self.increments_mj = set(sorted(self.increments_mj | new)[:32]) | {divisor}
        self.resolution_j, self.resolution_note = counter_resolution(list(self.increments_mj))

    def note(self, seen: list[Refresh]) -> None:
        """Keep refreshes of device 0 seen by the meter's own polling (to refine the grid)."""
        self.refreshes.extend(seen)
        del self.refreshes[:-KEEP_REFRESHES]

    def grid(self) -> Grid:
        """The refresh grid fitted to the refreshes seen (cached until more are seen)."""
        if self._grid is None or self._grid[0] != len(self.refreshes) or self.refreshes and \
                self._grid[1].points == 0:
            self._grid = (len(self.refreshes), fit_grid(self.refreshes, self.update_period(), 1e-3))
        return self._grid[1]

    def jitter(self) -> float:
        grid = self.grid()
        return grid.jitter if grid.points >= 4 else 0.0

    def lag_seen(self, after_s: float, behind: bool) -> None:
        """A window's tail: the first refresh ``after_s`` after the window's end had (not) caught up
        with it. The lag lies between the longest delay that was behind and the shortest that was not."""
        self.lag_tests += 1
        if behind and self.tails_blind:
            return
        if behind:
            self.lag_lo = max(self.lag_lo, after_s)
        else:
            self.lag_hi = min(self.lag_hi, after_s)
        if self.lag_lo >= self.lag_hi:  # inconsistent (jitter, noise): start over from this test
            self.lag_lo, self.lag_hi = (after_s, math.inf) if behind else (0.0, after_s)

    def seed_lag(self, lag_s: float) -> None:
        """A lag measured beforehand (harness-gpu-check, a sensor profile): the tests start from ± 5 ms of it."""
        self.lag_lo, self.lag_hi, self.lag_tests = max(0.0, lag_s - 0.005), lag_s + 0.005, 1
        self.lag_floor = self.lag_lo

    def blind_tails(self) -> None:
        """The idle after work was seen stepping down (harness/energy/afterwork.py): a tail's first interval above
        the next is then no sign of lag, so no tail says "behind" from now on, and what they said is dropped —
        the lag lies anywhere between its floor (0, or a profile's) and what the tails and the rising edge said
        it is below."""
        if not self.tails_blind:
            self.tails_blind, self.lag_lo, self.lag_hi = True, self.lag_floor, min(self.lag_hi, self.rise_hi)

    def lag_estimate(self) -> float:
        """Mid-way between what the tails showed once one was behind (or where they cannot tell: see
        :meth:`blind_tails`); 0 while none was (NaN before any test)."""
        if not self.lag_tests:
            return NAN
        mid = (self.lag_lo > 0 or self.tails_blind) and math.isfinite(self.lag_hi)
        return (self.lag_lo + self.lag_hi) / 2 if mid else self.lag_lo

    def lag_reported(self, narrow_s: float = 0.02) -> float:
        """The lag as a record states it: the midpoint once the tests bracket it within ``narrow_s``,
        else NaN (a lower bound alone, or a wide bracket, is no estimate: see ``lag_between_s``)."""
        if not self.lag_tests or not math.isfinite(self.lag_hi) or self.lag_hi - self.lag_lo > narrow_s:
            return NAN
        return (self.lag_lo + self.lag_hi) / 2

    def describe(self) -> dict:
        out = {"update_s": self.update_period(), "inferred_update_s": self.inferred_update_s,
               "jitter_s": self.jitter(), "refreshes_seen": len(self.refreshes)}
        if self.kind == "energy":
            out.update({"resolution_j": self.resolution_j, "resolution_note": self.resolution_note,
                        "lag_s": self.lag_reported(), "lag_between_s": [self.lag_lo, self.lag_hi],
                        "lag_tests": self.lag_tests})
        return out


def counter_resolution(increments_mj: list[int]) -> tuple[float, str]:
    """The resolution of a counter from its positive increments (mJ): their greatest common
    divisor — only an upper bound when every increment was the same."""
    steps = sorted({i for i in increments_mj if i > 0})
    if not steps:
        return NAN, "no counter increment seen"
    divisor = reduce(math.gcd, steps)
    if len(steps) == 1:
        return divisor / 1000.0, f"≤ {divisor / 1000:g} J (every increment seen was {divisor / 1000:g} J)"
    return divisor / 1000.0, f"{divisor / 1000:g} J (gcd of {len(steps)} distinct increments)"


def characterize(channels, clock, duration_s: float, poll_s: float = 0.001, max_factor: float = 5.0,
                 sensors: dict[str, Sensor] | None = None) -> dict[str, Sensor]:
    """Poll every channel each ``poll_s`` for ``duration_s`` (up to ``max_factor`` times longer until
    every device showed three changes) and fill in each :class:`Sensor`. Unreadable polls are
    skipped (the sampler reports failures)."""
    sensors = sensors if sensors is not None else {}
    for c in channels:
        sensors.setdefault(c.name, Sensor(c.name, c.kind, c.semantics.update_s if c.semantics else None))
    changes = {(c.name, i): [] for c in channels for i in range(len(c.handles))}
    increments: dict[str, list[int]] = {c.name: [] for c in channels}
    last: dict[tuple[str, int], float] = {}
    polled: dict[str, float] = {}
    start = clock.now()
    while clock.now() < start + duration_s * max_factor:
        if clock.now() >= start + duration_s and all(len(v) >= 3 for v in changes.values()):
            break
        for channel in channels:
            try:
                values = channel.read()
            except Exception:  # noqa: BLE001 — an unreadable poll yields nothing; the sampler reports it
                continue
            now = clock.now()
            for i, value in enumerate(values):
                key = (channel.name, i)
                if key in last and value != last[key]:
                    changes[key].append(now)
                    if channel.kind == "energy":
                        increments[channel.name].append(round((value - last[key]) * 1000))
                    if i == 0 and channel.name in polled:
                        before = polled[channel.name]
                        sensors[channel.name].note([Refresh((before + now) / 2, value, (now - before) / 2)])
                last[key] = value
            polled[channel.name] = now
        clock.sleep(poll_s)
    for channel in channels:
        per_device = [statistics.median(b - a for a, b in zip(times, times[1:])) if len(times) >= 3 else NAN
                      for (name, _), times in changes.items() if name == channel.name]
        sensor = sensors[channel.name]
        sensor.device_update_s = per_device
        known = [p for p in per_device if math.isfinite(p)]
        sensor.inferred_update_s = per_device[0] if per_device and math.isfinite(per_device[0]) else \
            (statistics.median(known) if known else NAN)
        if channel.kind == "energy":
            sensor.resolution_j, sensor.resolution_note = counter_resolution(increments[channel.name])
            sensor.increments_mj = {i for i in increments[channel.name] if i > 0}
    return sensors
