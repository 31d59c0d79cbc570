"""Sensor refreshes seen by fast polling, and phase shifting that does not depend on knowing
the update period exactly.

A part-time power reading (A100/H100: the average of the last 25 ms, refreshed every 100 ms)
sees a quarter of the run. A load periodic at (or near) the refresh rate is then seen at the
same phase throughout a trial, and the estimate can be off by tens of percent. Yang et al.
(2023, good practice 1) shift successive trials by evenly spaced fractions of the update period
so that together they see all of it.

The previous implementation aimed every trial at a phase counted from the *first trial's*
opening, using a period inferred on a 1 ms polling grid. Tens of seconds later that reference
had drifted by (elapsed ÷ period) × (period error): with a 100.3 ms sensor and 100 ms assumed,
several hundred periods × 0.3 ms — the four trials could land within 0.5 ms of one another.

Design chosen here: **aim each trial from a refresh observed just before it.** While the
meter waits before a trial (the random inter-trial delay it waits anyway), the main thread
polls the power field every millisecond and notes when its value changes — a refresh, located
to ±half a poll. The trial opens at ``refresh + (n + φ) × period`` with n ≤ 1, so the period
error enters at most once or twice (≤ 2 ms for a 1 ms error), not hundreds of times. Target
phases are φ_k = u + k/K (u random per measurement, K = min(phase_shifts, trials)).

The *achieved* phase of every trial is also measured (from the nearest observed refresh, the
period refined from refreshes many periods apart), with its uncertainty. The reported error
bound treats the trials as covering the period only when every phase is known to a few
milliseconds and the largest gap between them is at most the averaging window; otherwise the
bound includes the aliasing a part-time sensor can suffer (the unseen fraction of each period
times the load's dynamic power), so an unspread set of trials can never look confident.
Random phases alone were rejected: four random looks never tile the period, and with
probability ≈ 0.8 they leave more than 40 % of it unseen between two of them, so a locked load
would stay off by several percent in most measurements.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

NAN = math.nan


@dataclass(frozen=True)
class Refresh:
    """A sensor refresh seen by polling: estimated time, value read, ± half-width of the estimate."""

    t: float
    value: float
    halfwidth: float


class RefreshWatcher:
    """Polls a channel from the calling thread and notes each device's value changes (refreshes),
    each located to ± half the time between the two successful reads around it. A failed read is a
    glitch: it is counted and polling goes on (the next refresh is then located across the gap);
    only a fatal error or failures without a break for ``max_gap_s`` stop the watcher."""

    def __init__(self, channel, clock, poll_s: float, max_gap_s: float = 5.0, on_failure=None):
        self.channel, self.clock, self.poll_s, self.max_gap_s = channel, clock, poll_s, max_gap_s
        self.on_failure = on_failure  # (time, message) of each failed read, for the readings to count
        self.seen: list[list[Refresh]] = [[] for _ in channel.handles]
        self.error: str | None = None
        self.failures, self.failing_since = 0, None
        self.last, self.t_prev = None, clock.now()
        self._read()

    def _read(self) -> bool:
        from harness.energy.sources import is_fatal

        try:
            values = self.channel.read()
        except Exception as e:  # noqa: BLE001 — a glitch is retried; the windows it touches say so
            now = self.clock.now()
            self.failures += 1
            self.failing_since = now if self.failing_since is None else self.failing_since
            if self.on_failure is not None:
                self.on_failure(now, f"{self.channel.name} read failed: {e or type(e).__name__}")
            if is_fatal(e) or now - self.failing_since >= self.max_gap_s:
                self.error = f"{self.channel.name} read failed: {e or type(e).__name__}"
            return self.error is None
        t = self.clock.now()
        if self.last is not None:
            for d, (old, new) in enumerate(zip(self.last, values)):
                if new != old:
                    self.seen[d].append(Refresh((self.t_prev + t) / 2, new, (t - self.t_prev) / 2))
        self.last, self.t_prev, self.failing_since = values, t, None
        return True

    def step(self, sleep_s: float | None = None) -> bool:
        """Sleep (one poll period by default), read once; False once the channel cannot be read."""
        if self.error is not None:
            return False
        self.clock.sleep(self.poll_s if sleep_s is None else max(0.0, sleep_s))
        return self._read()


@dataclass(frozen=True)
class Grid:
    """A sensor's refresh grid fitted to observed refreshes: ``t0 + n × period``, the period's
    uncertainty, and the jitter of single refreshes about the grid (RMS, s)."""

    period: float
    sigma: float
    t_ref: float = NAN      # a grid point (at the last numbered refresh)
    ref_sigma: float = math.inf
    jitter: float = 0.0
    points: int = 0

    def phase(self, t: float) -> tuple[float, float]:
        """Phase of ``t`` on the grid and its uncertainty (s): the grid point's and the period's over
        the periods between — both from the fit, so they grow with the jitter observed. The jitter
        itself does not move a trial's phase: it scatters each reading about it (noise the readings'
        scatter within the trial carries into the bound)."""
        if not math.isfinite(self.t_ref) or not math.isfinite(self.period):
            return NAN, math.inf
        n = (t - self.t_ref) / self.period
        return n % 1.0, self.ref_sigma + abs(n) * self.sigma


def fit_grid(refreshes: list[Refresh], period: float, sigma: float) -> Grid:
    """The sensor's refresh grid from refreshes of one device seen over many periods.

    The period is found by folding: among candidate periods within ±3 % of ``period`` (spaced so
    that the phase drifts by ≤ 2 % of a period across the refreshes' span), the one at which the
    refreshes' phases bunch most tightly (the largest mean resultant of e^{2πi t/P}); each refresh is
    then numbered by rounding, and the grid is the least-squares line of time against number — its
    period's uncertainty three standard errors, its reference the grid point nearest the newest
    refresh (where it is used next: aiming a trial). Folding needs no chain of closely spaced
    refreshes, so refreshes seen in short bursts minutes apart, or jittered by milliseconds, still
    pin the grid. The residuals beyond each refresh's own ± half-width are the sensor's jitter
    (refreshes that do not come on a regular grid; a jittered sensor is never taken to be known
    better than its jitter). With fewer than four refreshes, or phases that do not bunch (jitter
    near a quarter period), the grid is left at ``period`` ± ``sigma``."""
    import numpy as np

    times = sorted(refreshes, key=lambda r: r.t)
    newest = times[-1] if times else None
    if len(times) < 4 or not math.isfinite(period) or period <= 0:
        return Grid(period, sigma, newest.t, newest.halfwidth) if newest else Grid(period, sigma)
    t = np.array([r.t for r in times]) - times[0].t
    span = max(t[-1], period)
    step = 0.02 * period * period / span
    count = min(int(0.06 * period / step) + 1, 20001)
    candidates = np.linspace(0.97 * period, 1.03 * period, count)
    resultant = np.abs(np.exp(2j * np.pi * np.outer(1.0 / candidates, t)).mean(axis=1))
    best = int(np.argmax(resultant))
    if resultant[best] < 0.5:
        return Grid(period, sigma, newest.t, newest.halfwidth)
    folded = candidates[best]
    offset = np.angle(np.exp(2j * np.pi * t / folded).mean()) / (2 * np.pi) * folded
    numbers = np.round((t - offset) / folded).astype(int)
    numbered: dict[int, tuple[float, float]] = {}
    for n, r in zip(numbers, times):
        numbered.setdefault(int(n), (r.t, r.halfwidth))
    if len(numbered) < 4:
        return Grid(period, sigma, newest.t, newest.halfwidth)
    return _least_squares(sorted((k, t0, h) for k, (t0, h) in numbered.items()), newest.t)


def _least_squares(numbered: list[tuple[int, float, float]], newest: float) -> Grid:
    ns = [x[0] for x in numbered]
    ts = [x[1] for x in numbered]
    mean_n, mean_t = sum(ns) / len(ns), sum(ts) / len(ts)
    sxx = sum((x - mean_n) ** 2 for x in ns)
    slope = sum((x - mean_n) * (y - mean_t) for x, y in zip(ns, ts)) / sxx
    t0 = mean_t - slope * mean_n
    reading_var = sum(x[2] ** 2 for x in numbered) / len(numbered) / 3  # ± half-width, uniform
    residual_var = sum((y - t0 - slope * x) ** 2 for x, y in zip(ns, ts)) / max(len(ns) - 2, 1)
    jitter = math.sqrt(max(residual_var - reading_var, 0.0)) if len(ns) > 3 else 0.0
    noise = math.sqrt(max(residual_var, reading_var, max(x[2] for x in numbered) ** 2 / 3))
    ref_n = round((newest - t0) / slope)  # the grid point nearest the newest refresh
    ref_sigma = 3 * noise * math.sqrt(1 / len(ns) + (ref_n - mean_n) ** 2 / sxx)
    return Grid(slope, 3 * noise / math.sqrt(sxx), t0 + slope * ref_n, ref_sigma, jitter, len(ns))


def phase_of(t: float, refreshes: list[Refresh], period: float, sigma: float) -> tuple[float, float]:
    """Phase (fraction of a period, in [0, 1)) of time ``t`` on the grid fitted to the sensor's
    refreshes (:meth:`Grid.phase`), else from the observed refresh nearest to ``t``; and its
    uncertainty in seconds."""
    if not refreshes or not math.isfinite(period):
        return NAN, math.inf
    grid = fit_grid(refreshes, period, sigma)
    if grid.points >= 4:
        return grid.phase(t)
    nearest = min(refreshes, key=lambda r: abs(r.t - t))
    periods = abs(t - nearest.t) / period
    return ((t - nearest.t) / period) % 1.0, nearest.halfwidth + math.ceil(periods) * sigma


def next_open(refresh_t: float, period: float, phase: float, not_before: float) -> float:
    """The first time ≥ ``not_before`` at ``phase`` of the period after a refresh at ``refresh_t``."""
    n = math.ceil((not_before - refresh_t) / period - phase)
    return refresh_t + (max(n, 0) + phase) * period


def largest_gap(phases: list[float]) -> float:
    """Largest gap (fraction of a period) between phases on the circle; 1.0 for a single phase."""
    ps = sorted(p % 1.0 for p in phases)
    if not ps:
        return 1.0
    gaps = [b - a for a, b in zip(ps, ps[1:])] + [ps[0] + 1.0 - ps[-1]]
    return max(gaps)


def covers_period(phases: list[float], sigmas_s: list[float], window_s: float, period_s: float) -> bool:
    """Whether trials opened at ``phases`` (each known to ± ``sigmas_s``) together see the whole
    update period through an averaging window of ``window_s``."""
    if not phases or any(not math.isfinite(p) for p in phases):
        return False
    worst = max(sigmas_s)
    if not math.isfinite(worst) or worst > 0.25 * window_s:
        return False
    return largest_gap(phases) <= (window_s + 2 * worst) / period_s
