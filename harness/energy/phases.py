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
    each located to ± half the time between the two reads around it."""

    def __init__(self, channel, clock, poll_s: float):
        self.channel, self.clock, self.poll_s = channel, clock, poll_s
        self.seen: list[list[Refresh]] = [[] for _ in channel.handles]
        self.error: str | None = None
        try:
            self.last = channel.read()
        except Exception as e:  # the sampler reports the failure with the window; here we just stop
            self.last, self.error = None, f"{channel.name} read failed: {e or type(e).__name__}"
        self.t_prev = clock.now()

    def step(self, sleep_s: float | None = None) -> bool:
        """Sleep (one poll period by default), read once; False once the channel cannot be read."""
        if self.error is not None:
            return False
        self.clock.sleep(self.poll_s if sleep_s is None else max(0.0, sleep_s))
        try:
            values = self.channel.read()
        except Exception as e:
            self.error = f"{self.channel.name} read failed: {e or type(e).__name__}"
            return False
        t = self.clock.now()
        for d, (old, new) in enumerate(zip(self.last, values)):
            if new != old:
                self.seen[d].append(Refresh((self.t_prev + t) / 2, new, (t - self.t_prev) / 2))
        self.last, self.t_prev = values, t
        return True

    def until_refreshes(self, want: int, timeout_s: float) -> list[list[Refresh]]:
        """Poll until every device showed ``want`` refreshes since this watcher began (or timeout);
        the refreshes seen, per device."""
        deadline = self.clock.now() + timeout_s
        while any(len(s) < want for s in self.seen) and self.clock.now() < deadline:
            if not self.step():
                break
        return self.seen


def refine_period(refreshes: list[Refresh], period: float, sigma: float) -> tuple[float, float]:
    """Refine ``period`` (± ``sigma``) from refreshes of one device seen over many periods.

    Refreshes are numbered by rounding their distance from the first in periods — valid while the
    period's uncertainty times that number stays under a quarter period — and the period is the
    least-squares slope of time against number; its uncertainty (three standard errors, each time
    known to ± its half-width) shrinks as the span grows, which lets farther refreshes be numbered
    in turn. A few refreshes in an idle gap and a few seconds later pin the period to microseconds,
    whatever its value was believed to be within a millisecond."""
    times = sorted(refreshes, key=lambda r: r.t)
    if len(times) < 2 or not math.isfinite(period) or period <= 0:
        return period, sigma
    first = times[0].t
    numbered: list[tuple[int, float, float]] = [(0, first, times[0].halfwidth)]
    best = (period, sigma)
    for r in times[1:]:
        p, s = best
        n = round((r.t - first) / p)
        if n <= numbered[-1][0] or n * s > p / 4:
            continue
        numbered.append((n, r.t, r.halfwidth))
        if len(numbered) < 3:
            continue
        ns = [x[0] for x in numbered]
        ts = [x[1] for x in numbered]
        mean_n, mean_t = sum(ns) / len(ns), sum(ts) / len(ts)
        sxx = sum((x - mean_n) ** 2 for x in ns)
        slope = sum((x - mean_n) * (y - mean_t) for x, y in zip(ns, ts)) / sxx
        noise = max(x[2] for x in numbered) / math.sqrt(3)
        fit_sigma = 3 * noise / math.sqrt(sxx)
        if fit_sigma < s:
            best = (slope, fit_sigma)
    return best


def phase_of(t: float, refreshes: list[Refresh], period: float, sigma: float) -> tuple[float, float]:
    """Phase (fraction of a period, in [0, 1)) of time ``t`` after the sensor's refreshes, from the
    observed refresh nearest to ``t``, and its uncertainty in seconds."""
    if not refreshes or not math.isfinite(period):
        return NAN, math.inf
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
