"""A polled power reading characterised at the start of the run, from one load step (issue 30 item 1).

What a power reading averages is a property of the reading on a device and driver, and the tables of
:mod:`harness.energy.hardware` were contradicted by the first real GPU (the H200's instant field: a
~117 ms window where 25 ms was assumed; ``power.draw`` a 1 s running average). ``harness-gpu-check``
measures every reading and writes a sensor profile (:mod:`.profiles`); a run whose power reading has
no such profile for its device and driver measures the figures it relies on itself, cheaply:

* the **update period** is measured at start-up already (1 ms polling at idle: :mod:`.sensors`);
* the **averaging window** and the **lag** from one idle → load → idle step made of the first
  prompt's own workload: the meter has just measured the settled idle (the GPU idle for seconds),
  then runs the workload back to back for ``STEP_S``, then waits ``POST_S`` of idle (``POST_MAX_S``
  where the fit's bracket reached from ≥ 0.7 s to the end of its windows, 1.35 s: a running average over
  1.3-2 s had not fallen back by then and the window was left at the table's 25 ms; its windows then reach
  3 s), polling
  the reading every millisecond (:class:`~harness.energy.characterize.FastLog`). A reading averaging the
  last W seconds, published ``lag`` late, of a step of power X on [a, b] (and of whatever level H
  the GPU keeps after it: P-state hysteresis) reads, at a refresh t,
  ``I + X·|[t−lag−W, t−lag] ∩ [a, b]|/W + H·|[t−lag−W, t−lag] ∩ [b, ∞)|/W``: it rises over W from
  a + lag and falls over W from b + lag. :func:`~harness.energy.characterize.fit_window` (the fit
  ``harness-gpu-check`` applies to its steps) finds both by least squares over a grid of (lag, W),
  X, H and the idle I solved exactly at each point; the set of (lag, W) whose residual is within
  the 95 % profile-likelihood threshold of the best is their uncertainty (a window shorter than
  the update period leaves the ramps between refreshes: its bracket then spans them, honestly).

The figures replace the assumed ones where the estimate is conclusive and differs; where the assumed
window lies inside the measured bracket it is kept ("consistent"); where the bracket is wide and
reaches below one update (a part-time window is possible) while the assumed one would not phase-shift
the trials, the trials are phase-shifted, their tails use the bracket's upper end and their own
falling edges narrow the window (:func:`refine`); where the step cannot settle it
(too small against the noise, refreshes seen too coarsely, the fit at the edge of its grid) the
assumed figure is kept and the reason said. :meth:`SelfCheck.describe` puts in the cell's summary
which figures were measured at start and which assumed, and from where; the measured semantics'
provenance goes into every reading's ``sensor_semantics``.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from harness.energy.characterize import LONG_WINDOWS, WINDOWS, FastLog, Fit, fit_window
from harness.energy.hardware import PowerSemantics, unevenness
from harness.energy.polledbound import UNEVEN

NAN = math.nan
PRE_S = 0.4     # idle polled before the step (the GPU has been idle since the meter's start-up)
STEP_S = 1.2    # the step: the workload back to back at least this long (longer than a 1 s window)
POST_S = 1.6    # idle polled after it: a 1 s window plus a lag and a few updates fall back within it
POST_MAX_S = 3.4  # ... or this long, where the fit's window bracket lay in 0.7 s .. its grid's end (1.35 s)
USED = ("measured", "bracketed")  # statuses whose figures replace the assumed ones


def verdict(fit: Fit | None, assumed: float | None, period: float, halfwidth: float,
            longest: float = WINDOWS[-1]) -> tuple[str, str]:
    """(status, why): ``measured`` (use the fitted window), ``bracketed`` (the assumed one lies far outside a
    wide bracket: use its upper end), ``consistent`` (the assumed one lies in the bracket: kept),
    ``inconclusive`` (kept, for the reason given)."""
    if fit is None:
        return "inconclusive", "fewer than six refreshes of the reading around the start-up load step"
    if math.isfinite(period) and halfwidth > period / 10:
        return "inconclusive", (f"refreshes seen only to ± {halfwidth * 1e3:.0f} ms (the meter's polls were late): "
                                "the step's ramps cannot be located")
    if fit.step_w < max(3 * fit.noise_w, 5.0):
        return "inconclusive", (f"the load step ({fit.step_w:.1f} W) is not clear of the readings' noise "
                                f"({fit.noise_w:.1f} W)")
    lo, hi = fit.window_between_s
    if hi >= longest * 0.999:
        return "inconclusive", f"the reading had not fallen back to idle {POST_S:g}-{POST_MAX_S:g} s after the step"
    if assumed is not None and lo <= assumed <= hi:
        return "consistent", (f"the assumed {assumed * 1e3:.0f} ms lies in the measured "
                              f"{lo * 1e3:.0f}..{hi * 1e3:.0f} ms")
    if fit.narrow():
        return "measured", f"window {lo * 1e3:.0f}..{hi * 1e3:.0f} ms (95 %)"
    if lo < period and (assumed is None or assumed >= 2 * period and unevenness(assumed, period) <= UNEVEN):
        # part-time not excluded where a long running average is assumed (which would not phase-shift the
        # trials): they are, and their own falling edges narrow it (:func:`refine`). An assumed window of one
        # update (100/100 ms) is left to the rules below: its edges cannot tell it from a slightly shorter one
        return "bracketed", (f"the window is only bracketed, {lo * 1e3:.0f}..{hi * 1e3:.0f} ms (95 %), and may be "
                             f"shorter than one update ({period * 1e3:.0f} ms): trials phase-shifted, the upper end "
                             "used for their tails until the trials' own falling edges narrow it")
    if assumed is not None and not lo / 2 <= assumed <= 2 * hi:
        return "bracketed", (f"the assumed {assumed * 1e3:.0f} ms lies far outside the measured {lo * 1e3:.0f}.."
                             f"{hi * 1e3:.0f} ms (95 %), which is wide: its upper end is used (every reading that "
                             "saw the work is counted)")
    return "inconclusive", f"the window is only bracketed, {lo * 1e3:.0f}..{hi * 1e3:.0f} ms, near the assumed figure"


@dataclass
class SelfCheck:
    """The start-of-run characterisation of a polled power reading, once per meter (``pending``
    until the first measurement runs it; ``status`` says what came of it)."""

    reading: str = ""
    status: str = "not needed"
    reason: str = ""
    assumed: PowerSemantics | None = None
    fits: list[Fit | None] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    cost_s: float = 0.0
    runs: int = 0
    update_from: str = ""
    edges: list[list[tuple[float, float, bool]]] = field(default_factory=list)  # per device: (d lo, d hi, saw work)
    narrowed: list[tuple[float, float] | None] = field(default_factory=list)    # per device: window from the edges

    @property
    def refining(self) -> bool:
        """Whether the trials' falling edges are to narrow the window (a bracketed one that may be part-time)."""
        return bool(self.edges)

    def part_time_possible(self, period: float) -> bool:
        """Whether device 0's window may still be shorter than ``period`` (its trials are then phase-shifted)."""
        if not self.refining or not math.isfinite(period):
            return False
        first, fit = (self.narrowed or [None])[0], (self.fits or [None])[0]
        low = first[0] if first is not None else fit.window_between_s[0] if fit is not None else 0.0
        return low < period

    def coverage_window(self, window: float) -> float:
        """The window trials' phases must tile with: while the window is narrowed from edges, its lower end
        (device 0's; the upper end counts the tails, the lower one is what each reading surely sees)."""
        first, fit = (self.narrowed or [None])[0], (self.fits or [None])[0]
        low = first[0] if first is not None else fit.window_between_s[0] if fit is not None else window
        return min(window, low) if self.refining else window

    @property
    def pending(self) -> bool:
        return self.status == "pending"

    def describe(self) -> dict:
        """Which figures of the reading were measured at the start of this run and which are assumed
        (and from where): ``energy_selfcheck`` in the cell's summary."""
        out: dict = {"reading": self.reading, "status": self.status, "reason": self.reason}
        if self.assumed is None:
            return out
        out.update({"update_s_from": self.update_from, "window_s_from": self._window_from(),
                    "lag_s_from": ("measured at start (one load step)" if self.status in USED else
                                   self._assumed()),
                    "assumed_window_s": self.assumed.window_s, "cost_s": self.cost_s, "runs": self.runs,
                    "per_device": [None if f is None else {
                        "window_s": f.window_s, "window_between_s": list(f.window_between_s), "lag_s": f.lag_s,
                        "lag_between_s": list(f.lag_between_s), "step_w": f.step_w, "noise_w": f.noise_w,
                        "status": s} for f, s in zip(self.fits, self.statuses)]})
        if self.refining:
            out["edges"] = [{"falling_edges": len(e), "window_between_s": None if n is None else list(n)}
                            for e, n in zip(self.edges, self.narrowed)]
        return out


    def _assumed(self) -> str:
        where = self.assumed.provenance if self.assumed is not None else "nothing known"
        return where if where.startswith("assumed") else f"assumed: {where}"

    def _window_from(self) -> str:
        assumed = self._assumed()
        if self.refining and any(self.narrowed):
            return ("measured: bracketed at start (one load step), narrowed from the trials' falling edges "
                    "(its upper end used)")
        return {"measured": "measured at start (one load step)",
                "bracketed": "measured at start (one load step): bracketed only, its upper end used",
                "consistent": f"{assumed} (consistent with the start-up load step)"}.get(self.status, assumed)


def needed(state) -> SelfCheck:
    """Whether this meter's reading is to be characterised at start: a polled power reading (the
    protocol on) whose window was not measured for this device and driver (no sensor profile) nor
    set in the ``gpu`` profile."""
    cfg, power = state.cfg, state.primary
    check = SelfCheck(reading=power.name)
    if getattr(cfg, "self_check", None) is False:  # null (the default) and true: on
        check.reason = "energy.self_check=false: the assumed figures are used"
    elif power.kind != "power" or not cfg.protocol:
        check.reason = "the primary source is an energy counter" if power.kind != "power" else "energy.protocol=false"
    elif power.semantics is not None and "(harness-gpu-check)" in power.semantics.provenance:
        check.reason = "figures measured by harness-gpu-check for this device and driver"
    elif power.semantics is not None and power.semantics.provenance.startswith("set in gpu profile"):
        check.reason = power.semantics.provenance
    else:
        check.status, check.assumed = "pending", power.semantics
        check.reason = "no sensor profile for this device and driver: characterised on the first prompt's workload"
    return check


def run(state, check: SelfCheck, workload) -> None:
    """Make the load step from ``workload`` (run back to back for ``STEP_S``; the results are not
    measured), fit it per device and use the figures where conclusive (module docstring)."""
    clock, power = state.clock, state.primary
    began = clock.now()
    log = FastLog([power], clock, state.cfg.phase_poll_s)
    clock.sleep(PRE_S)
    state.synchronize()
    a = clock.now()
    while clock.now() - a < STEP_S:
        state.run_once(workload)
        check.runs += 1
    b = clock.now()
    clock.sleep(POST_S)
    fits, longest = _fits(log, power, (a, b), WINDOWS), WINDOWS[-1]
    if any(_beyond(f, longest) for f in fits):  # a window of 0.7 s or more, longer than the grid: watch on, fit
        clock.sleep(POST_MAX_S - POST_S)       # windows up to 3 s
        fits, longest = _fits(log, power, (a, b), LONG_WINDOWS), LONG_WINDOWS[-1]
    log.stop()
    check.cost_s = clock.now() - began
    with log.lock:
        changes = list(log.changes[power.name])
    inferred = state.sensors[power.name].inferred_update_s
    check.update_from = "measured at start (1 ms polling at idle)" if math.isfinite(inferred) else check._assumed()
    halfwidth = statistics.median([h for _, h, _ in changes]) if changes else math.inf
    period = state.update_period(power)
    assumed = check.assumed.window_s if check.assumed is not None else None
    for d, fit in enumerate(fits):
        status, why = verdict(fit, assumed, period, halfwidth, longest)
        check.fits.append(fit)
        check.statuses.append(status)
        if d == 0:
            check.status, check.reason = status, why
    if check.status == "bracketed" and check.fits[0] is not None and check.fits[0].window_between_s[0] < period:
        check.edges = [[] for _ in check.fits]  # narrowed from the trials' falling edges (:func:`refine`)
        check.narrowed = [None for _ in check.fits]
    _apply(state, check)


def _beyond(fit: Fit | None, longest: float) -> bool:
    """Whether a clear step's (``verdict``'s test) window bracket lies from half the grid's end to its end."""
    return fit is not None and fit.step_w >= max(3 * fit.noise_w, 5.0) and \
        fit.window_between_s[0] >= longest / 2 and fit.window_between_s[1] >= longest * 0.999


def _fits(log: FastLog, power, step: tuple[float, float], windows) -> list[Fit | None]:
    """Per device, :func:`fit_window` of the readings logged so far around the load ``step`` (a, b)."""
    with log.lock:
        changes = list(log.changes[power.name])
    return [fit_window([(t, v[d]) for t, _, v in changes if t >= step[0] - PRE_S], [step], windows=windows)
            for d in range(len(power.handles))]


def _apply(state, check: SelfCheck) -> None:
    """Give the reading the measured window and lag where a device's fit was used."""
    power, base = state.primary, check.assumed or PowerSemantics(None, None, "")
    devices = state.sources.devices
    driver = state.sources.driver
    per = list(power.per_device) or [base] * len(check.fits)
    for d, (fit, status) in enumerate(zip(check.fits, check.statuses)):
        if status not in USED or fit is None or d >= len(per):
            continue
        lo, hi = fit.window_between_s
        name = devices[d].name if d < len(devices) else "?"
        window = fit.window_s if status == "measured" else hi
        ms = window * 1e3
        bracket = f"{lo * 1e3:.0f}..{hi * 1e3:.0f} ms" + ("" if status == "measured" else ": its upper end")
        where = (f"window {ms:.0f} ms ({bracket}), lag {fit.lag_s * 1e3:.0f} ms measured"
                 f" at the start of this run on {name}, driver {driver or '?'} (one load step); "
                 f"assumed before: {base.describe()}")
        per[d] = PowerSemantics(per[d].update_s, window, f"measured at start: {ms:.0f} ms average", fit.lag_s,
                                where)
    power.per_device = per
    power.semantics = per[0]


TOL_W = 3.0          # a reading this far (or 2 %) from the post-work level saw some of the work
MIN_EDGES = 4        # falling edges before the window is narrowed from them


def refine(state, check: SelfCheck, trials) -> None:
    """Narrow a bracketed window from the trials' own falling edges (issue 30 item 1): after each
    trial's end b the meter polls the reading every millisecond until b + W + 1.5 updates (W the
    window used: the bracket's upper end at first). A refresh at b + d reads the post-work level
    (the tail's last refresh) once the window no longer reaches back before b, i.e. d ≥ W + lag, and
    differs from it before. Each refresh seen before b + W is one such observation; over many trials
    their d fall at all phases, so W + lag lies above the latest refresh that differed and at or
    below the earliest later one that did not (refreshes located ± their half-width). That upper
    end is used (every reading that saw work is in each tail); the lower end decides, with the
    update period, whether the trials must be phase-shifted. A level moving after work (a P-state
    stepping down) reads as "saw work": the window comes out longer, never shorter."""
    power = state.primary
    per = list(power.per_device)
    for d, obs in enumerate(check.edges):
        if d >= len(per) or per[d].window_s is None:
            continue
        window = per[d].window_s
        for trial in trials:
            seen = [r for r in (trial.tail_seen[d] if d < len(trial.tail_seen) else []) if r.t > trial.b]
            if len(seen) < 2 or seen[-1].t - seen[-1].halfwidth - trial.b < window:
                continue
            post = seen[-1].value
            obs += [(r.t - r.halfwidth - trial.b, r.t + r.halfwidth - trial.b, abs(r.value - post) > max(
                TOL_W, 0.02 * abs(post))) for r in seen[:-1]]
        if len(obs) < MIN_EDGES:
            continue
        lo = max([a for a, _, moved in obs if moved], default=0.0)
        # no refresh back at the post-work level after the latest that differed: longer than the tails looked
        longer = max(window, lo + (per[d].update_s or 0.1))
        hi = min([b for a, b, moved in obs if not moved and a >= lo], default=longer)
        hi = max(hi, lo)
        check.narrowed[d] = (lo, hi)
        per[d] = PowerSemantics(per[d].update_s, hi, f"measured: window + lag ≤ {hi * 1e3:.0f} ms", per[d].lag_s,
                                f"window + lag {lo * 1e3:.0f}..{hi * 1e3:.0f} ms from {len(obs)} falling edges of "
                                f"this run's trials (its upper end used); {_step_text(check, d)}")
    power.per_device = per
    power.semantics = per[0]


def _step_text(check: SelfCheck, d: int) -> str:
    fit = check.fits[d] if d < len(check.fits) else None
    if fit is None:
        return "no start-up step fit"
    lo, hi = fit.window_between_s
    before = check.assumed.describe() if check.assumed is not None else "nothing known"
    return f"the start-up load step bracketed {lo * 1e3:.0f}..{hi * 1e3:.0f} ms; assumed before: {before}"
