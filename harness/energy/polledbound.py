"""The error bound of the polled protocol (:mod:`.polled`), derived from the measurement's own data:
a 99 % statement — each error source turned into a standard deviation σ (a normal error keeps its σ;
a σ estimated from n draws takes Student's t(0.995, n) instead of Z), the terms summed in quadrature,
× Z = 2.576; a bounded term (known up to a range) counts at its full size. The convention of the
counter path (:func:`harness.energy.counter._trial_energy`).

**Trials verified to tile the update period** (a part-time or uneven reading; K = 8 phases φ_k = u + k/K).
Trial k's mean power is p̂_k = p_k + a(φ_k) + n_k: the trial's true power, the aliasing of its phase (how
the reading's window sees the load at that phase: tens of percent for a load locked to the refresh
rate) and noise independent between trials (the sensor's refresh jitter moving each window and each
held reading's edges, the sampler locating each refresh, each trial's aim, runs of varying length).
The estimate is the mean over trials. With K = 2 P/W phases (25 ms of every 100 ms: K = 8) the even
phases (0, 2, 4, 6) tile the period on their own, and so do the odd ones: each half's aliasing sums to
zero, so its mean A (B) is the true power plus the mean of its own trials' noise. The halves' noise is
independent and alike, so (A + B)/2 − p and d = (A − B)/2 have the same distribution, independently:

    σ²(estimate) = E[d²]     — d, the split-half difference, is one draw of the estimate's noise.

One draw alone supports a 99 % statement only with t(0.995, 1) = 63.7, so d is pooled, relative to the
estimate, over the meter's stratified measurements on this sensor (this one and up to ``POOL − 1``
before it): σ² = mean d², with t(0.995, n) for n pooled (n = 1: 63.7 σ; n = 3: 5.8 σ; n = 10: 3.2 σ); the
measurements of a cell differ (prompts of 6 or 12 s), so σ is never taken below this one's own |d|.
The earlier calibrated figure (readings' noise ÷ K + 2 × the tiling mismatch, set on issue 30's study;
:func:`_early`) is stated wherever it is the smaller — always until n = ``YOUNG``, and after it where d keeps what
is not the estimate's noise (below) — and the basis says so, with the derived figure beside it. The smaller of two
statements misses only where one of them misses: at most the sum of their miss rates (Bonferroni), and each held on
every prompt of every row of the study; where the model's floor (below) is above the calibrated figure the floor is
stated. Median
bound ÷ median error cannot come below t(0.995, n) × 0.97 ÷ 0.674 (≈ 5 at n = 7, 4.4 at n = 15) even
where σ is exact. Each trial of a
round yields no further draw: cutting trials into pieces puts the halves' different attribution of
the energy near each cut (several % of a piece) into the pieces' differences.

Where d says more than the estimate's noise (on the safe side): the halves do not tile exactly (a window
that is not a multiple of their spacing 2P/K: the H200's 117 ms on 100 ms — the halves' aliasing is large
and opposite, the whole round's small; there the calibrated figure below is stated where smaller, and
the basis says so); the trials' true powers differ (a load riding on an idle that wanders): the
halves run in the order A B B A B A A B (Thue–Morse, ``STRATA``), so a drift linear or quadratic in time
is the same in both and leaves d, a faster one stays in it.

**A model of the noise, as a floor.** Two of the noise's sources are measured: each
trial's phase off the ideal grid u + s/K (where its aim landed: ± half a poll; u fitted to all K), ε_j,
and the sensor's refresh jitter σ_J (RMS about the fitted grid), which moves each of trial j's N_j
windows independently. Either moves trial j's power by its slope against phase g_j (W per period, from
the neighbouring phases' powers): σ_j² = (g_j / P)² (ε_j² + σ_J² / N_j), σ_model² = Σ_j σ_j² / K².
Where the halves tile, Z σ_model is a floor under the statement (what the measured aim offsets and
jitter alone must cause); it is never used to lower t × the pooled σ: alone, with Z, it understated the
noise of bursty loads without jitter (93 % held at 3 × 10) — the split-half sees noise it does not name.

What d cannot see is what the two halves share: where the phases sit (both are placed from one fitted
refresh grid). Each phase is known to ± σ_φ (a third of :func:`phase_of`'s three-standard-error figure);
moving phase j by σ_φ moves trial j's power by g_j σ_φ / P: σ_tile² = Σ_j (g_j σ_φ,j / P)² / K², × Z — where the
grid has ≥ 4 points, propagated through its two parameters instead (a shared shift and the period's error ×
each trial's periods from the reference, through the signed slopes: :func:`_tile`).

**Each trial's aim offset corrected** (:mod:`.aimoffset`): where 8 phases with one trial each have offsets
measured above their uncertainty, each trial's power is moved to its aimed phase (offset × its central slope
against phase) before anything above; the estimate is the corrected trials' mean (``mean_p`` in the result),
and d, the slopes and the calibrated figure are the corrected trials'.

**Every instant seen** (a window of whole updates): a t-interval over trials, or one trial's readings'
noise. **Phases not verified** (no counter, repeats exhausted): the t-interval over trials plus the
aliasing a part-time reading can suffer (the unseen share × idle to the power limit), added whole.
Always, in quadrature (:func:`.polled.reading`): the post-work idle over the extensions (the idle
tracker's 99 % figure, and half the range of the readings that saw only the extension's idle) and the
run-time weighting (equal weights per trial against time weights, at full size).
"""
from __future__ import annotations

import math
import statistics
import weakref

from harness.energy import aimoffset
from harness.energy.hardware import unevenness
from harness.energy.idle import Z, quantile
from harness.energy.phases import covers_period, fit_grid, largest_gap, phase_of
from harness.energy.trialidle import comparable

NAN = math.nan
# the order in which a round visits its 8 phases: even indices (half A) and odd ones (half B) in the Thue–Morse
# pattern A B B A B A A B — both halves' mean time and mean squared time are equal
STRATA = (0, 1, 3, 2, 5, 4, 6, 7)
YOUNG = 3     # fewer pooled degrees of freedom than this: the calibrated figure where it is the smaller
POOL = 30     # stratified measurements whose split-half differences are pooled (the latest ones)
UNEVEN = 0.01  # readings weighing instants more unevenly than this are phase-shifted (aliasing a periodic load)
_POOLS: "weakref.WeakKeyDictionary[object, list[tuple[float, int]]]" = weakref.WeakKeyDictionary()


def pooled(state, variance: float, dof: int) -> tuple[float, int]:
    """Add this measurement's estimate of its relative noise variance (with its degrees of freedom); the
    pooled σ and degrees of freedom over the latest ``POOL`` of this meter's measurements."""
    history = _POOLS.setdefault(state, [])
    history.append((variance, dof))
    del history[:-POOL]
    total = sum(n for _, n in history)
    return math.sqrt(sum(v * n for v, n in history) / total), total


def terms(state, trials, refreshes, powers, stats, seconds, mean_p, finite) -> dict:
    """The statistical, aliasing and run-time terms of the polled bound (each a 99 % figure, relative),
    and the phases' facts (module docstring)."""
    power = state.primary
    period, window = state.update_period(power), state.power_window(power)
    part = min(1.0, window / period) if window is not None and math.isfinite(period) else NAN
    unseen = unevenness(window, period)  # the unseen share, or how unevenly a longer window weighs instants
    k, total_s = len(trials), sum(seconds)
    out = {"stat": 0.0, "alias": 0.0, "runtime": 0.0, "gap": NAN, "verified": None, "basis": ""}
    if not finite:
        return {**out, "stat": NAN}
    # one trial's readings: their scatter over the unseen share (the readings' noise), ≈ 99 %
    sampling = Z * math.sqrt(sum((cv * math.sqrt(unseen / n) * p) ** 2 for (cv, n), p in zip(stats, powers))) / (
        k * mean_p)
    t_interval = quantile(k - 1) * statistics.stdev(powers) / math.sqrt(k) / mean_p if k > 1 else NAN
    out["runtime"] = abs(sum((s / total_s - 1 / k) * (p - mean_p) for s, p in zip(seconds, powers))) / mean_p
    if math.isfinite(part) and part >= 1 and unseen <= UNEVEN:  # every instant seen, evenly enough
        stat = max(t_interval if math.isfinite(t_interval) else 0.0, sampling)
        return {**out, "stat": stat, "parts": {"t_interval": t_interval, "sampling": sampling},
                "basis": f"full coverage; t-interval over {k} trials / readings' noise "
                f"{100 * stat:.2f} %" if k > 1 else f"full coverage, one trial: readings' noise {100 * stat:.2f} % "
                f"(windows overlapping unevenly: {unseen:.3f})"}
    grid = fit_grid(refreshes, period, 1e-3)
    ref_period = grid.period
    phases = [phase_of(t.opened, refreshes, period, 1e-3) for t in trials]
    cover = window if state.window_check is None else state.window_check.coverage_window(window)  # selfcheck
    out["verified"] = bool(math.isfinite(part) and covers_period([p for p, _ in phases], [s for _, s in phases],
                                                                 min(cover, period), ref_period))
    if all(math.isfinite(p) for p, _ in phases):
        out["gap"] = largest_gap([p for p, _ in phases])
    if out["verified"] and k >= 4 and k % 2 == 0:
        jitter = state.sensors[power.name].jitter()
        counts = [n for _, n in stats]
        spacing = 2 * period / k  # the phases of one half: they tile where the window is a multiple of it
        tiles = abs((window % period) / spacing - round((window % period) / spacing)) < 0.05
        common = ([(t.opened - grid.t_ref) / grid.period for t in trials], grid.ref_sigma / 3,
                  grid.sigma / 3) if grid.points >= 4 else None  # every phase from this one grid (phase_of)
        return {**out, **_stratified(state, trials, powers, phases, mean_p, ref_period, (jitter, counts),
                                     (sampling * 2 / Z, part, total_s), tiles, common)}
    # the unseen fraction of each period could have drawn anything from idle to the power limit
    idle_w = sum(sum(state.idle.net_energy(t.a, t.b)) for t in trials) / total_s
    limit = state.power_limit_w()
    ceiling = max(limit - mean_p, mean_p - idle_w) / mean_p if math.isfinite(limit) and mean_p > 0 else 1.0
    stat = t_interval if math.isfinite(t_interval) else sampling
    what = "t-interval over trials" if math.isfinite(t_interval) else "readings noise"
    return {**out, "stat": stat, "alias": unseen * ceiling,
            "basis": f"{what} {100 * stat:.2f} % + aliasing of a part-time reading {100 * unseen * ceiling:.1f} % "
                     "(trial phases not known to tile the update period)"}


def _stratified(state, trials, powers: list[float], phases: list[tuple[float, float]], mean_p: float,
                ref_period: float, jitter: tuple[float, list[float]] | None = None,
                calibrated: tuple[float, float, float] | None = None, tiles: bool = True,
                common: tuple[list[float], float, float] | None = None) -> dict:
    """Noise (the model, else the pooled split-half or trials' scatter) and the phases' shared uncertainty,
    for trials that tile the period; ``jitter``: the sensor's refresh jitter (s, RMS) and the readings per
    trial; ``calibrated``: (readings' noise ≈ 95 %, window ÷ period, seconds measured) for :func:`_early`;
    ``common``: the phases' one grid (each trial's periods from its reference, the reference's and the period's
    σ, s) for :func:`_tile`."""
    k = len(powers)
    aim = aimoffset.correct(trials, powers, phases, ref_period)  # each trial's power at its aimed phase
    powers, mean_p = (aim.powers, statistics.fmean(aim.powers)) if aim is not None else (powers, mean_p)
    powers, inflation, fitted = comparable(trials, powers)  # what the idle at each trial's edges explains taken out
    order = sorted(range(k), key=lambda i: phases[i][0])
    m = [powers[i] for i in order]
    slopes = [(abs(m[j] - m[j - 1]) + abs(m[(j + 1) % k] - m[j])) / 2 * k for j in range(k)]  # W per period
    halves = [[p for t, p in zip(trials, powers) if t.stratum % 2 == h] for h in (0, 1)]
    if min(map(len, halves)) == 0:
        halves = [powers[0::2], powers[1::2]]
    d = abs(statistics.mean(halves[0]) - statistics.mean(halves[1])) / 2 / mean_p * math.sqrt(inflation)
    sigma_j, counts = jitter if jitter is not None else (0.0, [1.0] * k)
    # each trial's phase off the ideal grid u + s/K (u fitted): where the aim landed (± half a poll); corrected
    off = [0.0] * k if aim is not None else aimoffset.offsets(trials, phases, ref_period)
    model = math.sqrt(sum((s / ref_period) ** 2 * (off[order[j]] ** 2 + sigma_j ** 2 / counts[order[j]])
                          for j, s in enumerate(slopes))) / (k * mean_p)
    varied = aimoffset.varied(trials)
    if varied:  # runs of varying length scatter each trial's phases: the trials are independent draws
        split, dof = pooled(state, statistics.variance(powers) * (k - 1) / (k - 1 - fitted) / k / mean_p ** 2,
                            k - 1 - fitted)
    else:
        split, dof = pooled(state, d * d, 1)
    split = max(split, d)  # prompts differ: this one's own draw, where larger than the cell's (on the safe side)
    noise = quantile(dof) * split
    how = "trials' scatter (runs of varying length)" if varied else "split-half, even against odd phases"
    if tiles and Z * model > noise:  # what the measured aim offsets and jitter alone must cause
        noise, how = Z * model, (f"each trial's phase off the grid (aim) and refresh jitter {sigma_j * 1e3:.1f} ms "
                                 "× the trials' slope against phase")
    tile = _tile(powers, phases, slopes, order, ref_period, common) / k / mean_p
    # what the aim's correction may leave (its slopes' error × each trial's own offset) differs between trials: the
    # split-half of the corrected trials holds it (shown beside, not added); the phases' shared error is ``tile``
    stat = math.hypot(noise, Z * tile)
    early = _early(m, slopes, [phases[i] for i in order], mean_p, ref_period, varied, counts,
                   calibrated) if calibrated is not None else NAN
    parts = {"noise": noise, "tile": Z * tile, "model": Z * model, "split": split, "d": d, "dof": dof,
             "early": early, "derived": stat, "aim": Z * aim.residual if aim else 0.0}  # 99 % (split, d: σ)
    fix, note = ({}, "") if aim is None else ({"mean_p": mean_p}, aimoffset.described(aim, Z))
    if not how.startswith("each") and math.isfinite(early) and early < stat:
        why = (f"too few measurements pooled ({dof} degrees of freedom" if tiles and dof < YOUNG else
               "the calibrated figure is the smaller (a drift or uneven runs the split-half keeps: the smaller of "
               "two statements, each held on the study's every row" if tiles else
               "each half's phases do not tile the period (the window is not a multiple of their spacing: d "
               "holds the halves' own aliasing")
        return {"stat": early, "parts": parts, **fix,
                "basis": f"{k} phases verified to tile the update period: {why}; derived: "
                f"{100 * stat:.2f} %), the calibrated figure {100 * early:.2f} % (readings' noise ÷ K + 2 × tiling, "
                "issue 30's study)" + note}
    return {"stat": stat, "parts": parts, **fix,
            "basis": f"{k} phases verified to tile the update period: noise {100 * noise:.3f} % "
            f"({how}; pooled σ {100 * split:.3f} % over {dof} degrees of freedom, this one's split-half "
            f"{100 * d:.3f} %, the model's σ {100 * model:.3f} %), phases' uncertainty σ {100 * tile:.3f} %" + note}


def _tile(powers: list[float], phases: list[tuple[float, float]], slopes: list[float], order: list[int],
          ref_period: float, common: tuple[list[float], float, float] | None) -> float:
    """Σ over trials of how far the phases' uncertainty moves each trial's power (W; σ), × 1/K by the caller.
    Without ``common``: each phase's σ (a third of :func:`phase_of`'s figure) × its |slope|, independent between
    trials (``slopes`` in phase ``order``). With it: every phase comes from ONE fitted grid, so their errors are
    δφ_j = (δt_ref + n_j δP) / P (n_j periods from the reference) — a shift common to all moves the trials'
    powers by Σ g_j δt_ref / P, and the period's error by Σ g_j n_j δP / P, g_j the signed central slopes (W per
    period; Σ g_j ≈ 0 round a period); the two added whole (≥ their quadrature with any covariance)."""
    g = aimoffset.central_slopes(powers, phases) if common is not None else None
    if common is None or g is None:
        return math.sqrt(sum((s * phases[order[j]][1] / 3 / ref_period) ** 2 for j, s in enumerate(slopes)))
    periods, sigma_ref, sigma_p = common
    return (abs(sum(g)) * sigma_ref + abs(sum(x * n for x, n in zip(g, periods))) * sigma_p) / ref_period


def _early(m: list[float], slopes: list[float], phases: list[tuple[float, float]], mean_p: float,
           ref_period: float, varied: bool, counts: list[float], calibrated: tuple[float, float, float]) -> float:
    """The calibrated figure (issue 30's study, not derived) a young pool or halves that do not tile fall back
    on: the readings' noise ÷ K (÷ √K for a window longer than the update) + 2 × the tiling mismatch (gaps
    off 1/K × the trials' deviation, and each phase's uncertainty × its slope); the full noise for runs of
    varying length or a sampler that saw < 90 % of the refreshes. ``m``, ``slopes``, ``phases`` in phase
    order."""
    sampling, part, total_s = calibrated
    k = len(m)
    gaps = [((phases[(j + 1) % k][0] - phases[j][0]) % 1.0) for j in range(k)]
    tiling = sum(abs(g - 1 / k) * abs(m[j] - mean_p) for j, g in enumerate(gaps))
    tiling += math.sqrt(sum((s * phases[j][1] / ref_period / k) ** 2 for j, s in enumerate(slopes)))
    seen = sum(counts) / max(total_s / ref_period, 1.0)
    cancel = (k if part < 1 else math.sqrt(k)) if seen >= 0.9 and not varied else 1.0
    return sampling / cancel + (2 if cancel > 1 else 1) * tiling / mean_p


def strata(k: int, phases: int) -> int:
    """The phase index (of ``phases`` evenly spaced) trial ``k`` of a round is aimed at: for 8 phases in the
    order ``STRATA`` (drift leaves the split-half difference), else in turn."""
    return STRATA[k % 8] if phases == len(STRATA) else k % phases
