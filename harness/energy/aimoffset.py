"""Each polled trial's power corrected for its measured aim offset (issue 30.3; :mod:`.polledbound`).

The polled protocol aims trial s of a round at phase u + s/K of the sensor's refresh grid, polling at
``phase_poll_s`` (1 ms): each trial opens up to a poll off its aim, and its phase φ_s is measured afterwards
(:func:`.phases.phase_of`). Trial s's mean power is p̂_s = p + a(φ_s) + n_s (aliasing a of its phase, noise
n_s); the mean over trials cancels the aliasing only where the phases sit on the ideal grid. The offset
ε_s = φ_s − (u + s/K) (u fitted to all K) leaves a(u + s/K) + a′ ε_s: with a load locked to the refresh
rate (a 10 Hz square on a 25 ms window of 50 ms updates) the slope a′ is tens of percent per period, and
offsets of ± 1 ms put ≈ 0.1 % into the estimate and twice as much into the split-half difference d.

The correction, first order: p̃_s = p̂_s − g_s ε_s, g_s the slope against phase from the two neighbouring
phases, (p̂_next − p̂_prev) ÷ (φ_next − φ_prev). Summed over the trials this is the trapezoidal rule over the
measured phases (weights (φ_next − φ_prev)/2 instead of 1/K): the mean of the corrected trials estimates the
mean power at the ideal, tiling phases. What it can leave:

* the slope's own uncertainty: a kink of a(φ) between neighbours (the true slope at φ_s lies between the
  left and the right one, g_l and g_r) and the trials' noise in them: ≤ |g_r − g_l| / 2 × |ε_s| per trial,
  differing between trials, so the split-half difference of the corrected trials holds it — ``residual``
  (a σ, relative) is shown beside the bound, not added (added, it counted the same error twice: the known-truth
  test in tests/energy/test_polledbound.py);
* the phases' own uncertainty (σ_φ, from the one fitted grid): the offsets are measured with it — the bound's
  ``tile`` term (:func:`.polledbound._tile`) covers it;
* the noise n_s moved through the slopes into neighbours' corrections: first order in ε K (a few %) of
  the noise, which the split-half difference of the corrected trials still sees.

Identifiable only where each of the K ≥ ``MIN_TRIALS`` phases has one trial (a neighbour on either side),
the runs are of even length (varying runs scatter each trial's phases: no one phase per trial), and the
measured offsets are larger than their own uncertainty (``SPREAD`` × the phases' σ, RMS); else
:func:`correct` returns None and the bound is today's.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

MIN_TRIALS = 8  # phases per round: fewer leave neighbours too far apart for a slope (a quarter period at 4)
SPREAD = 1.0    # the offsets' RMS must exceed this × the phases' RMS σ (s): else they are not measured


@dataclass
class AimCorrection:
    """Trials' powers corrected for their aim offsets (module docstring)."""

    powers: list[float]     # W, per trial, corrected
    offsets: list[float]    # s, each trial's phase off the ideal grid u + s/K
    slopes: list[float]     # W per period, the central slopes used
    residual: float         # relative σ of what the first-order correction may leave (the slope's uncertainty)
    shift: float            # relative change of the mean power


def varied(trials) -> bool:
    """Runs of varying length (> 5 % cv): each trial's later runs start at scattered phases."""
    durations = [x for t in trials for x in t.durations]
    return len(durations) > 1 and statistics.stdev(durations) > 0.05 * statistics.mean(durations)


def rms(values) -> float:
    return math.sqrt(statistics.fmean(v * v for v in values))


def offsets(trials, phases: list[tuple[float, float]], ref_period: float) -> list[float]:
    """Each trial's phase off the ideal grid u + stratum/K (s), u fitted to all K (circular mean)."""
    k = len(trials)
    ideal = [(phases[i][0] - t.stratum / k) % 1.0 for i, t in enumerate(trials)]
    u = math.atan2(sum(math.sin(2 * math.pi * x) for x in ideal), sum(math.cos(2 * math.pi * x) for x in ideal))
    return [((x - u / (2 * math.pi) + 0.5) % 1.0 - 0.5) * ref_period for x in ideal]


def _neighbours(phases: list[tuple[float, float]]):
    """Per trial in phase order: (trial, previous, next, gap to the previous, gap to the next), gaps in periods."""
    k = len(phases)
    order = sorted(range(k), key=lambda i: phases[i][0])
    for j, i in enumerate(order):
        prev, nxt = order[j - 1], order[(j + 1) % k]
        yield i, prev, nxt, (phases[i][0] - phases[prev][0]) % 1.0, (phases[nxt][0] - phases[i][0]) % 1.0


def central_slopes(powers: list[float], phases: list[tuple[float, float]]) -> list[float] | None:
    """Each trial's slope against phase (W per period, signed): (p_next − p_prev) ÷ (φ_next − φ_prev) over its
    neighbours in phase order; None where two phases coincide."""
    slopes = [0.0] * len(powers)
    for i, prev, nxt, gap_l, gap_r in _neighbours(phases):
        if min(gap_l, gap_r) <= 0:
            return None
        slopes[i] = (powers[nxt] - powers[prev]) / (gap_l + gap_r)
    return slopes


def correct(trials, powers: list[float], phases: list[tuple[float, float]], ref_period: float) -> AimCorrection | None:
    """The trials' powers corrected for their measured aim offsets, or None where not identifiable."""
    k = len(powers)
    if k < MIN_TRIALS or sorted(t.stratum for t in trials) != list(range(k)) or varied(trials):
        return None
    if not all(math.isfinite(p) and math.isfinite(s) for p, s in phases) or not ref_period > 0:
        return None
    off = offsets(trials, phases, ref_period)
    if rms(off) <= SPREAD * rms([s / 3 for _, s in phases]):
        return None
    slopes = central_slopes(powers, phases)
    if slopes is None:
        return None
    mean_p = statistics.fmean(powers)
    fixed, left_over = list(powers), 0.0
    for i, prev, nxt, gap_l, gap_r in _neighbours(phases):
        bend = abs((powers[nxt] - powers[i]) / gap_r - (powers[i] - powers[prev]) / gap_l) / 2
        fixed[i] = powers[i] - slopes[i] * off[i] / ref_period
        left_over += (bend * off[i] / ref_period) ** 2
    new_mean = statistics.fmean(fixed)
    return AimCorrection(fixed, off, slopes, math.sqrt(left_over) / k / new_mean, new_mean / mean_p - 1)


def described(aim: AimCorrection, z: float) -> str:
    """The correction, for the bound's basis (``z``: the 99 % factor its leftover is shown at)."""
    return (f"; each trial's power corrected for its aim offset (RMS {1e3 * rms(aim.offsets):.2f} ms × its slope "
            f"against phase: the mean moved {100 * aim.shift:+.3f} %; what the slopes' error may leave, "
            f"{100 * z * aim.residual:.3f} %, is in the split-half)")
