"""Idle power tracked through a cell: right after work (for window edges) and settled (for net energy).

A GPU does not fall to its idle floor the moment work ends: P-state hysteresis keeps its clocks up
for a while (+40 W for 1.5 s was seen), and its idle wanders with temperature. Two kinds of
measurement are kept, per device, as functions of time:

* **post-work** idle (:meth:`IdleTracker.add_post`): one sensor update right after each prompt,
  which the meter waits through anyway to close a window on a refresh. It is what the GPU draws
  around a window's edges, and it follows the idle's wandering prompt by prompt;
* **settled** idle (:meth:`IdleTracker.add_settled`): measured after ``idle_settle_s`` of
  idleness (once the decay has stopped) — at meter start-up, after the first prompt, and every
  ``idle_settled_every_s`` — each right after a post-work measurement, so the post-work curve
  there minus the settled value is the hysteresis *offset* at that moment.

Net energy subtracts the settled floor: post-work idle interpolated to the window (it tracks the
wandering) minus the offset (the median of the last few), or the settled curve alone where no
post-work measurement exists. :meth:`net_uncertainty` says how well that is known (≈ 95 %): the
post-work curve's roughness (how far its points fall from the line through their neighbours: a
wandering idle is rough on the prompts' time scale), the offsets' scatter, and 1 % of idle.
:meth:`definition` states which idle a record subtracted.
"""
from __future__ import annotations

import bisect
import math
import statistics

from harness.energy.afterwork import AfterWork

NAN = math.nan
# a stated bound covers its error with 99 % (per term: 2.576 standard deviations of a normal error), so
# that a cell of a few tens of prompts sees ≥ 95 % of them within it (issue 30); a 95 % figure would miss
# that in a quarter of 20-prompt cells. A standard deviation estimated from n differences: Student's t
Z = 2.576


def quantile(dof: float) -> float:
    """The 99 % two-sided quantile for an error whose standard deviation was estimated with ``dof``
    degrees of freedom (Student's t; Z when known exactly: ``dof`` infinite)."""
    from scipy.stats import t

    return Z if dof == math.inf else float(t.ppf(0.995, dof)) if dof >= 1 else math.inf


def welch_dof(parts: list[tuple[float, float]]) -> float:
    """Degrees of freedom of a variance summed from independently estimated ``parts`` (variance, its
    degrees of freedom; ``inf`` where known exactly): Welch–Satterthwaite, Σv)² / Σ(v²/ν)."""
    total = sum(v for v, _ in parts)
    den = sum(v * v / n for v, n in parts if n != math.inf and v > 0)
    return total * total / den if den > 0 else math.inf


def block_steps(values: list[float], k: int) -> tuple[float, int]:
    """RMS difference (W) between the means of adjacent blocks of ``k`` successive readings (every pair,
    overlapping: an Allan-type deviation on the time scale of k readings), and how many independent
    differences it rests on (non-overlapping pairs of blocks, n // k − 1). NaN, 0 with fewer than 2k."""
    n = len(values)
    if k < 1 or n < 2 * k:
        return NAN, 0
    csum = [0.0]
    for v in values:
        csum.append(csum[-1] + v)
    diffs = [(csum[i + 2 * k] - 2 * csum[i + k] + csum[i]) / k for i in range(n - 2 * k + 1)]
    return math.sqrt(_ms(diffs)), n // k - 1


class Curve:
    """Timed measurements (one value per device), linearly interpolated; flat beyond the ends."""

    def __init__(self, devices: int, keep: int = 4096):
        self.devices, self.keep = devices, keep
        self.times: list[float] = []
        self.watts: list[list[float]] = []

    def add(self, t: float, watts: list[float]) -> bool:
        if len(watts) != self.devices or not all(math.isfinite(w) for w in watts):
            return False
        i = bisect.bisect_right(self.times, t)
        self.times.insert(i, t)
        self.watts.insert(i, list(watts))
        if len(self.times) > self.keep:
            del self.times[0], self.watts[0]
        return True

    def __len__(self) -> int:
        return len(self.times)

    def at(self, t: float) -> list[float]:
        if not self.times:
            return [NAN] * self.devices
        i = bisect.bisect_right(self.times, t)
        if i == 0:
            return list(self.watts[0])
        if i == len(self.times):
            return list(self.watts[-1])
        t0, t1 = self.times[i - 1], self.times[i]
        f = (t - t0) / (t1 - t0) if t1 > t0 else 1.0
        return [w0 + (w1 - w0) * f for w0, w1 in zip(self.watts[i - 1], self.watts[i])]

    def integral(self, a: float, b: float) -> list[float]:
        """∫ over [a, b] per device (exact for the piecewise-linear curve)."""
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

    def roughness(self, a: float, b: float, around: int = 4) -> float:
        """RMS distance (W, devices summed) of the measurements near [a, b] from the line through
        their two neighbours: how far linear interpolation between measurements can be off (NaN with
        fewer than five measurements: too few to tell)."""
        if len(self.times) < 5:
            return NAN
        lo = max(bisect.bisect_right(self.times, a) - around, 1)
        hi = min(bisect.bisect_left(self.times, b) + around, len(self.times) - 1)
        dev = []
        for i in range(lo, hi):
            t0, t1, t2 = self.times[i - 1], self.times[i], self.times[i + 1]
            f = (t1 - t0) / (t2 - t0) if t2 > t0 else 0.5
            line = [w0 + (w2 - w0) * f for w0, w2 in zip(self.watts[i - 1], self.watts[i + 1])]
            dev.append(sum(self.watts[i]) - sum(line))
        return math.sqrt(sum(x * x for x in dev) / len(dev)) if dev else NAN


def _ms(values: list[float]) -> float:
    return sum(x * x for x in values) / len(values) if values else NAN


def _range(curve: Curve) -> float:
    totals = [sum(w) for w in curve.watts]
    return max(totals) - min(totals) if len(totals) >= 2 else 0.0


class IdleTracker:
    """Post-work and settled idle per device through a cell (see the module docstring)."""

    def __init__(self, devices: int):
        self.devices = devices
        self.post, self.settled = Curve(devices), Curve(devices)
        self.edge = Curve(devices)  # right after work where the post-work idle is read later (counter: add_edge)
        self.last_post = -math.inf
        self.last_settled = -math.inf
        self.settle_s = 0.0
        self.steps: list[list[float]] = [[] for _ in range(devices)]  # adjacent idle intervals' differences (W)
        self.after: list[list[float]] = [[] for _ in range(devices)]  # the same right after work
        self.fine: list[list[float]] = [[] for _ in range(devices)]  # a faster power reading's successive idle
        self.fine_scale = NAN  # readings (W), one every fine_scale seconds (its update or window, the longer)
        self.post_delay = [NAN] * devices  # after work the idle was seen moving this long (s; counter._post_index)
        self.profile = AfterWork(devices)  # the idle right after work by delay after work (counter tails)

    def add_steps(self, device: int, diffs: list[float], after: bool = False) -> None:
        """Differences (W) between the mean idle powers of adjacent sensor intervals on ``device`` (``after``:
        right after work, where P-state steps fall)."""
        pool = (self.after if after else self.steps)[device]
        pool.extend(d for d in diffs if math.isfinite(d))
        del pool[:-256]

    def add_fine(self, device: int, readings: list[float], scale: float) -> None:
        """Successive idle readings (W) of a power reading faster than the primary sensor on ``device``, one
        every ``scale`` seconds: how the idle moves on time scales shorter than the primary's interval."""
        self.fine[device] = [w for w in readings if math.isfinite(w)][-4096:]
        self.fine_scale = scale

    def step_sigma(self, device: int | None = None) -> float:
        """How much the idle power moves between adjacent sensor intervals (W, one standard deviation) on
        ``device``, or devices summed in quadrature: the RMS of the measured differences — what an idle
        stretch next to an interval differs from that interval's mean power by. NaN before two differences."""
        devices = range(self.devices) if device is None else [device]
        if not all(len(self._pool(d)) >= 2 for d in devices):
            return NAN
        return math.sqrt(sum(_ms(self._pool(d)) for d in devices))

    def still_sigma(self, device: int) -> float:
        """How much the idle moves between adjacent sensor intervals at rest (W, one standard deviation: the
        RMS of the start-up baseline's differences alone), NaN before two."""
        steps = self.steps[device]
        return math.sqrt(_ms(steps)) if len(steps) >= 2 else NAN

    def _pool(self, device: int) -> list[float]:
        """The differences σ rests on: at idle and right after work together, unless right after work they
        move significantly more (F-test, 95 %: P-state steps there), then those alone."""
        after, steps = self.after[device], self.steps[device]
        if len(after) < 2 or len(steps) < 2:
            return steps if len(after) < 2 else after
        from scipy.stats import f

        return after if _ms(after) / _ms(steps) > f.ppf(0.95, len(after), len(steps)) else steps + after

    def step_dof(self, device: int | None = None) -> int:
        """How many differences :meth:`step_sigma` rests on (the fewest of the devices')."""
        return min(len(self._pool(d)) for d in (range(self.devices) if device is None else [device]))

    def stretch_bound(self, device: int, seconds: float, sig: float, own: float = NAN, rest: bool = False) -> float:
        """99 % bound (J) on the error of an idle stretch of ``seconds`` whose energy is taken at the mean power
        of the adjacent sensor interval (length T), on ``device``. ``sig``: that rate's σ (W) as the edge found
        it (the idle's movement between intervals, or its own noise where larger); ``own``: its own noise alone.

        The error is ``seconds`` × (m_s − m_T), m_s the stretch's mean idle power, m_T the interval's. Where a
        faster power reading measured the idle (``self.fine``), the two are disjoint stretches of a stationary
        idle: Var(m_s − m_T) = Var(m_s) + Var(m_T) + own², and adjacent blocks of equal length L differ by
        D_L with D_L² = 2 Var(m_L) — so Var(m_s) = D_s²/2, D_s measured on blocks of the faster reading
        ``seconds`` long (:func:`block_steps`, at least one reading), and Var(m_T) = D_T²/2, D_T the
        measured movement between adjacent intervals (:meth:`step_sigma`). A linear drift m is covered as
        well: it adds m²s² to D_s² and m²T² to D_T², and (D_s² + D_T²)/2 ≥ (m (s + T)/2)², the drift's share.
        Right after work, where the intervals move significantly more (P-state steps, :meth:`_pool`), a step
        between stretch and interval is no stationary noise: D_T² counts in full there. The quantile is
        Student's t on the Welch–Satterthwaite degrees of freedom of the sum (:func:`welch_dof`).
        Without a faster reading the stretch moves as an interval does: ``seconds`` × ``sig`` (or the
        differences as they stand now, where larger: this window's own post-work ones count), t on the
        differences σ rests on (Z before two). ``rest``: the differences at rest only (the steps after work
        are modelled: :func:`harness.energy.afterwork.tail`)."""
        pool = self.steps[device] if rest and len(self.steps[device]) >= 2 else self._pool(device)
        dof = len(pool) if rest else self.step_dof(device)
        k = max(1, round(seconds / self.fine_scale)) if math.isfinite(self.fine_scale) and self.fine_scale > 0 else 0
        fine, fine_dof = block_steps(self.fine[device], k) if k else (NAN, 0)
        if not math.isfinite(fine) or len(pool) < 2 or not math.isfinite(own):
            moved = math.sqrt(_ms(pool)) if len(pool) >= 2 else 0.0
            return (quantile(dof) if dof >= 2 else Z) * seconds * max(sig, moved)
        steps = _ms(pool) * (1.0 if pool is self.after[device] else 0.5)
        parts = [(fine * fine / 2, float(fine_dof)), (steps, float(len(pool))), (own * own, math.inf)]
        return quantile(welch_dof(parts)) * seconds * math.sqrt(sum(v for v, _ in parts))

    def add_post(self, t: float, watts: list[float]) -> None:
        if self.post.add(t, watts):
            self.last_post = max(self.last_post, t)

    def add_edge(self, t: float, watts: list[float]) -> None:
        """What the GPU drew right after work where the post-work idle (:meth:`add_post`) was read later,
        once it had stopped moving (an idle stepping down after work): the edges' idle, not the net's."""
        self.edge.add(t, watts)

    def _edge_curve(self) -> Curve:
        return self.edge if len(self.edge) else self.post if len(self.post) else self.settled

    def add_settled(self, t: float, watts: list[float]) -> None:
        """A settled measurement at ``t`` (taken right after a post-work one)."""
        if self.settled.add(t, watts):
            self.last_settled = max(self.last_settled, t)

    def at_settled(self, watts: list[float]) -> bool:
        """Whether idle ``watts`` (per device) are at the last settled level (within 2 %: no hysteresis to
        wait out)."""
        settled = sum(self.settled.watts[-1]) if len(self.settled) else NAN
        return math.isfinite(settled) and abs(sum(watts) - settled) <= max(0.02 * settled, 2.0 * self.devices)

    @property
    def offsets(self) -> list[tuple[float, list[float]]]:
        """(t, post-work − settled idle per device) at each settled measurement taken after a post-work
        one: the post-work curve there (interpolated between the prompts around it, so a wandering
        idle does not pose as hysteresis) minus the settled value."""
        if not len(self.post):
            return []
        first = self.post.times[0]
        return [(t, [p - w for p, w in zip(self.post.at(t), watts)])
                for t, watts in zip(self.settled.times, self.settled.watts) if t > first]

    def __len__(self) -> int:
        return len(self.post) + len(self.settled)

    # ---- around a window's edges: what the GPU draws right after work ------------------------
    def edge_at(self, t: float) -> list[float]:
        return self._edge_curve().at(t)

    def edge_energy(self, a: float, b: float) -> list[float]:
        return self._edge_curve().integral(a, b)

    def edge_uncertainty(self, a: float, b: float) -> float:
        """± W (devices summed, ≈ 99 %) of the post-work idle near [a, b] as the power of an idle stretch
        there: the idle's own movement between adjacent sensor intervals (Z × :meth:`step_sigma`, as
        measured) with twice the post-work curve's roughness (before five measurements: their range).
        Where the idle's movement was never measured: ≥ 2 % of the level (before five measurements ≥ 5 %),
        assumed."""
        level = sum(self.edge_at((a + b) / 2))
        curve = self.edge if len(self.edge) else self.post
        rough = curve.roughness(a, b)
        if not math.isfinite(level):
            return NAN
        tracked = 2 * rough if math.isfinite(rough) else _range(curve)
        step = self.step_sigma()
        if math.isfinite(step):
            return math.hypot(tracked, quantile(self.step_dof()) * step)
        return max(2 * rough if math.isfinite(rough) else max(_range(curve), 0.05 * level), 0.02 * level)

    # ---- for net energy: the settled floor ----------------------------------------------------
    def _settled_spread(self, t: float) -> float:
        """Range (W, devices summed) of the last three settled measurements up to ``t`` + 60 s: how
        far the floor itself moves (a wandering idle), against which an offset must stand out."""
        totals = [sum(w) for s, w in zip(self.settled.times, self.settled.watts) if s <= t + 60.0][-3:]
        return max(totals) - min(totals) if len(totals) >= 2 else 0.0

    def _offset(self, t: float) -> list[float] | None:
        """The hysteresis offset per device: the median of the last three, shrunk by how much the
        settled floor itself moved (an idle that wanders as much as the offset leaves it unidentified)."""
        offsets = self.offsets
        if not offsets:
            return None
        recent = [o for s, o in offsets if s <= t + 60.0][-3:] or [offsets[0][1]]
        median = [statistics.median(o[d] for o in recent) for d in range(self.devices)]
        shrink = self._settled_spread(t) / self.devices
        return [math.copysign(max(abs(o) - shrink, 0.0), o) for o in median]

    def net_at(self, t: float) -> list[float]:
        offset = self._offset(t)
        if len(self.post) and offset is not None:
            return [p - o for p, o in zip(self.post.at(t), offset)]
        if len(self.settled):
            return self.settled.at(t)
        return self.post.at(t)

    def net_energy(self, a: float, b: float) -> list[float]:
        """∫ idle over [a, b] per device, as net energy subtracts it."""
        offset = self._offset((a + b) / 2)
        if len(self.post) and offset is not None:
            return [p - o * (b - a) for p, o in zip(self.post.integral(a, b), offset)]
        if len(self.settled):
            return self.settled.integral(a, b)
        return self.post.integral(a, b)

    def net_uncertainty(self, a: float, b: float) -> float:
        """± W (devices summed, ≈ 95 %) of the idle that net energy subtracts over [a, b]: twice the
        tracked curve's roughness (before three measurements: the range of each kind's values so
        far), with the offsets' scatter (one offset alone: as uncertain as the idle moves), plus 1 %."""
        level = sum(self.net_at((a + b) / 2))
        if not math.isfinite(level):
            return NAN
        tracked = self.post if len(self.post) else self.settled
        rough = tracked.roughness(a, b)
        spread = 2 * rough if math.isfinite(rough) else max(_range(self.settled), _range(self.post), 0.02 * level)
        offsets = [sum(o) for s, o in self.offsets if s <= (a + b) / 2 + 60.0][-3:]
        spread = math.hypot(spread, self._settled_spread((a + b) / 2))
        if len(self.post) and self.settle_s > 0:
            if len(offsets) >= 2:
                spread = math.hypot(spread, max(offsets) - min(offsets))
            elif offsets:  # one offset: it may be the idle moving as much as it does between measurements
                spread = math.hypot(spread, min(abs(offsets[0]), spread))
            else:
                spread += 0.1 * level  # no settled point since work began: the hysteresis is unknown
        return spread + 0.01 * level

    def definition(self) -> str:
        """Which idle net energy subtracts, in words (``energy.idle_definition``)."""
        if self.offsets and len(self.post):
            return (f"settled: idle after ≥ {self.settle_s:g} s without work ({len(self.settled)} measurements), "
                    f"tracked by the post-work idle of each prompt minus the hysteresis offset "
                    f"({len(self.offsets)} measured)")
        if len(self.settled) and not len(self.post):
            return f"settled: idle after ≥ {self.settle_s:g} s without work ({len(self.settled)} measurements)"
        if len(self.post):
            return "post-work: idle one sensor update after each prompt (not settled: energy.idle_settle_s=0)"
        return "none"
