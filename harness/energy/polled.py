"""Measuring a workload with polled power only (no energy counter): how it runs, its reading and
its error bound — the protocol of Yang, Adamek & Armour 2023 ("Part-time Power Measurements:
nvidia-smi's Lack of Attention", arXiv 2312.02741; GUIDE §2): ``trials`` trials of runs lasting
``min_window_s`` or ``min_repetitions``, with these changes:

* phases are aimed from the refresh grid fitted to the refreshes seen so far (not from one
  refresh, whose own jitter would move the aim) and measured afterwards with their uncertainty,
  which includes the jitter actually observed (:mod:`harness.energy.phases`);
* edges: each trial is preceded by ≥ W + P of idle and followed by ≥ W + 1.5 P of idle (W the
  sensor's averaging window, P its update period) and integrates the held readings over
  [a, b + W + 1.5 P] minus post-work idle over the extension: every reading that saw any of the
  window is counted once and none of the idle around it;
* the power rise is measured rather than discarded (``discard_rise_s: 0``);
* trials are strata (phases of the update period) and weigh equally as **mean power**: energy =
  mean over trials of (trial energy ÷ trial time) × measured time. Weighting per run instead
  over-weighted trials of slower runs (+4 % with ±30 % run-time variation); how much the estimate
  would move between equal and time weights goes into the bound (``run_time_cv`` is recorded);
* a trial in which a failed poll hid a sensor refresh is run again (``glitch_retries``).
* trials whose phases do not verify to tile the period: the counter's figure for their windows
  where the GPU has one, else the round is repeated at fresh phases (:mod:`.unverified`).

Error bound: a 99 % statement derived from the measurement's own data — the two halves of the trials
(even and odd phases, each tiling the period on its own) as a draw of the estimate's noise, the
phases' uncertainty, the idle at the edges and the run-time weighting, in quadrature
(:mod:`.polledbound` derives it).
"""
from __future__ import annotations

import math
import statistics
from typing import Callable

from harness.energy import pretrial, selfcheck, unverified
from harness.energy.hardware import unevenness
from harness.energy.phases import Refresh, RefreshWatcher, covers_period, fit_grid, next_open, phase_of
from harness.energy.polledbound import UNEVEN, strata, terms as bound_terms
from harness.energy.readout import build_reading
from harness.energy.reading import EnergyReading
from harness.energy.series import HOLD
from harness.energy.trialidle import edge_idle
from harness.energy.trials import Runs, Trial, release

NAN = math.nan


def phase_shifting(state) -> bool:
    """Phase shifting applies to a part-time power reading (window shorter than its period) and to a
    window that is not a whole number of updates (117 ms on 100 ms: each update's last 17 ms counted
    twice — a load periodic near the refresh rate aliases; issue 30)."""
    power = state.primary
    if power.kind != "power" or state.cfg.phase_shifts == 1:
        return False
    window, update = state.power_window(power), state.update_period(power)
    if state.window_check is not None and state.window_check.part_time_possible(update):
        return True  # a bracketed window that may be part-time (:func:`selfcheck.refine` narrows it)
    return window is not None and math.isfinite(update) and unevenness(window, update) > UNEVEN


def run(state, label: str, workload: Callable) -> tuple[list, EnergyReading, list[Trial]]:
    """Measure ``workload`` with polled power: phase-aimed trials, edge-exact integration. Where a
    phase-shifted reading's trials do not verify to tile its period: the counter's figure for their
    windows where there is a counter, else further rounds at fresh phases (:mod:`.unverified`)."""
    cfg, power = state.cfg, state.primary
    shifting = phase_shifting(state)
    n_trials = max(cfg.trials, cfg.phase_shifts) if shifting else cfg.trials
    refreshes: list[Refresh] = list(state.sensors[power.name].refreshes[-64:])  # device 0's, earlier and now
    earlier = len(refreshes)
    counter = unverified.counter_channel(state) if shifting else None
    results: list = []
    state.synchronize()
    began = state.clock.now()
    rounds, action = 0, None
    while True:
        reads: list = []
        trials, retries, glitch = _round(state, workload, results, refreshes, n_trials, began, shifting,
                                         reads if counter is not None else None)
        rounds += 1
        if state.window_check is not None:  # a bracketed window: narrowed from these trials' falling edges
            selfcheck.refine(state, state.window_check, trials)
        if not shifting or _verified(state, trials, refreshes):
            if rounds > 1:
                action = f"phases verified after {rounds} rounds of {n_trials} trials"
            break
        if counter is not None:
            figure = unverified.counter_figure(state, counter, trials, reads)
            if figure is not None:
                state.note(power, [refreshes[earlier:]])
                out = reading(state, label, trials, refreshes, glitch, retries, counter_figure=figure)
                return results, out, trials
        if rounds > unverified.PHASE_REPEATS:
            action = (f"phases not verified to tile the update period after {rounds} rounds of {n_trials} trials "
                      f"(no energy counter{'' if counter is None else ' figure: a read failed or went backwards'}): "
                      "the wide aliasing bound is stated")
            break
        release(state.sampler, trials)  # a round that did not verify: run another at fresh phases
        del results[:]
    state.note(power, [refreshes[earlier:]])
    return results, reading(state, label, trials, refreshes, glitch, retries, action=action), trials


def _verified(state, trials: list[Trial], refreshes: list[Refresh]) -> bool:
    """Whether the trials' phases are known to tile the (part-time or uneven) reading's period."""
    power = state.primary
    period, window = state.update_period(power), state.power_window(power)
    if window is None or not math.isfinite(period):
        return False
    if state.window_check is not None:  # narrowed from edges: the phases must tile its lower end
        window = state.window_check.coverage_window(window)
    phases = [phase_of(t.opened, refreshes, period, 1e-3) for t in trials]
    return covers_period([p for p, _ in phases], [s for _, s in phases], min(window, period),
                         fit_grid(refreshes, period, 1e-3).period)


def _round(state, workload, results, refreshes, n_trials, began, shifting, reads) -> tuple[list[Trial], int, str | None]:
    """One round of ``n_trials`` trials at evenly spaced phases from a random offset (a trial a failed
    poll touched is rerun); with ``reads`` a list, the counter is read before each trial and after its tail."""
    cfg, clock, power = state.cfg, state.clock, state.primary
    period, window = state.update_period(power), state.power_window(power)
    p_eff = period if math.isfinite(period) else 0.1
    w_eff = window if window is not None else p_eff
    phases = min(cfg.phase_shifts, n_trials)
    offset = state.rng.random()
    counter = unverified.counter_channel(state) if reads is not None else None
    trials: list[Trial] = []
    retries, glitch = 0, None
    while len(trials) < n_trials:
        stratum = strata(len(trials), phases)
        target = (offset + stratum / phases) % 1.0 if shifting else None
        if shifting and trials and not trials[0].aimed:  # trial 0 opened unaimed (no refresh seen): aim from it
            first, _ = phase_of(trials[0].opened, refreshes, p_eff, 1e-3)
            target = (first + stratum / phases) % 1.0 if math.isfinite(first) else target
        since, watcher = clock.now(), RefreshWatcher(power, clock, cfg.phase_poll_s, cfg.max_gap_s)
        not_before = clock.now() + max(state.rng.uniform(*cfg.trial_delay_s), w_eff + p_eff)
        opened, aimed = aim(watcher, not_before, target, refreshes, p_eff)
        refreshes.extend(watcher.seen[0])
        trial = Trial(opened=opened, watched_from=began, aimed=aimed, stratum=stratum if shifting else -1,
                      idle_edges=[edge_idle(watcher.seen, since, w_eff, opened)])
        before = (clock.now(), unverified.read_counter(counter)[0]) if counter is not None else None
        runs = Runs(state, trial, workload, results)
        while True:
            runs.run()
            if runs.enough():
                break
        runs.close()
        _tail(state, trial, refreshes, p_eff, w_eff)
        why, _ = state.trouble(power, trial.a - w_eff - p_eff, trial.ext_b, hidden_ok=False)
        if why is not None and state.sampler.failure(power.name) is None:
            if retries < cfg.glitch_retries:  # run this trial again
                retries += 1
                runs.drop()
                release(state.sampler, [trial])
                continue
            glitch = f"{why}; {retries} trial(s) rerun, the last still touched"
        if before is not None:
            reads.append((*before, clock.now(), unverified.read_counter(counter)[0]))
        trials.append(trial)
    return trials, retries, glitch


def _tail(state, trial: Trial, refreshes: list[Refresh], p_eff: float, w_eff: float) -> None:
    """Wait until every reading whose averaging window touched [a, b] is in, however late the
    sampler saw it; the idle after it is the post-work idle."""
    cfg, clock, power = state.cfg, state.clock, state.primary
    lag = max(state.sampler.max_poll_gap(power.name, trial.a) - cfg.interval_s, 0.0)
    trial.ext_b = trial.b + w_eff + 1.5 * p_eff + lag
    trial.anchor_ext = state.sampler.anchor(trial.ext_b)
    tail = RefreshWatcher(power, clock, cfg.phase_poll_s, cfg.max_gap_s)
    deadline = trial.ext_b + 3 * p_eff + 0.1
    while not (clock.now() >= trial.ext_b and state.sampler.settled(trial.ext_b)) and clock.now() < deadline:
        if not tail.step():
            break
    stop: tuple[float, list] = (clock.now(), list(tail.last or []))
    until, early = -math.inf, _early(tail, trial.b, p_eff, w_eff, stop)
    trial.idle_edges = trial.idle_edges[:1] + [sum(e[0][1] for e in early) if all(early) else NAN]
    # the settled idle's wait follows where the idle after work is off the settled level: watch it settle meanwhile
    # (free; where it is at that level the wait is skipped, and a watch would delay the next trial: issue 30.5)
    wait = state.settled_due() and tail.error is None and all(early) and not state.idle.at_settled(
        [sum(v for _, v in e) / len(e) for e in early])
    while wait and clock.now() < trial.b + min(cfg.idle_settle_s, 0.5) and tail.step():
        pass
    for _ in range(3):  # the idle after work seen moving this long after work: read it past that, every prompt
        delay = _post_delay(state, tail, trial.b, w_eff, p_eff)
        if not math.isfinite(delay) or until >= trial.b + delay + w_eff + p_eff:
            break
        until = trial.b + delay + w_eff + p_eff
        while clock.now() < until and tail.step():
            pass
    refreshes.extend(r for r in tail.seen[0] if r.t <= stop[0])  # those the aim has seen before (the phases)
    trial.tail_seen = [[r for r in seen if r.t <= stop[0]] for seen in tail.seen]  # the self-check's edges: to ext_b
    trial.tail_range = _idle_from_watch(state, tail, trial.b, p_eff, w_eff, early)
    if state.settled_due():
        state.settle_idle(trial.b, wait=wait)


def _after_work(seen: list[Refresh], idle_since: float, window: float) -> list[tuple[float, float]]:
    """(time, W) of the refreshes whose averaging window lies wholly after ``idle_since`` (the end of work)."""
    return [(r.t, r.value) for r in seen if r.t - r.halfwidth - window >= idle_since]


def _early(watcher: RefreshWatcher, idle_since: float, period: float, window: float,
           stop: tuple[float, list]) -> list[list[tuple[float, float]]]:
    """Per device, the (time, W) readings the extension drew after work: each refresh up to ``stop`` (the
    extension's end, the readings then held) whose window lies after ``idle_since``, and the one held then."""
    out = []
    for d, seen in enumerate(watcher.seen):
        early = [(t, v) for t, v in _after_work(seen, idle_since, window) if t <= stop[0]]
        if stop[0] - period - window >= idle_since and d < len(stop[1]):
            early.append((stop[0], stop[1][d]))
        out.append(early)
    return out


def _idle_from_watch(state, watcher: RefreshWatcher, idle_since: float, period: float, window: float,
                     drawn: list[list[tuple[float, float]]]) -> float:
    """Post-work idle from the power readings the meter's own polling saw right after a trial
    (since ``idle_since``, the trial's end): every refresh whose averaging window lies after it, and
    the current reading if it is recent enough. Independent of the sampler thread's rate. Those in ``drawn``
    (:func:`_early`) are what the extension drew: the edges' idle. For net energy the post-work idle is read
    at one delay after work through the cell (issue 30.5: an idle stepping down 0.2 s after work read before
    the step on some prompts and after it on others put net 4.4 % off):
    from the readings whose window starts once the idle has stopped moving — the latest reading that
    differed from the last one seen by more than 3 σ of the idle's movement at rest ends the delay
    (``IdleTracker.post_delay``, the longest so far; later tails watch past it). Returns the range of
    the edges' readings (W, devices summed): how far the idle moved while they were taken."""
    if watcher.error is not None or watcher.last is None:
        return 0.0
    now = state.clock.now()
    edge, post, times, spread = [], [], [], 0.0
    for d, seen in enumerate(watcher.seen):
        values = _after_work(seen, idle_since, window)
        early = drawn[d] if d < len(drawn) else []
        if now - period - window >= idle_since:
            values.append((now, watcher.last[d]))
        early = early or values[:1]
        if not values:
            return 0.0
        delay = state.idle.post_delay[d]
        late = [(t, v) for t, v in values if not math.isfinite(delay) or t - window - idle_since >= delay] or \
            values[-1:]
        edge.append(sum(v for _, v in early) / len(early))
        post.append(sum(v for _, v in late) / len(late))
        times += [t for t, _ in early]
        spread += max(v for _, v in early) - min(v for _, v in early)
    state.idle.add_edge((min(times) + max(times)) / 2, edge)
    state.idle.add_post((min(times) + max(times)) / 2, post)
    return spread


def _post_delay(state, watcher: RefreshWatcher, idle_since: float, window: float, period: float) -> float:
    """Raise ``IdleTracker.post_delay`` (per device) to where the idle after work has surely stopped moving: the
    latest reading that differed from the last one by more than 3 σ of the idle's movement at rest (√2 × its
    RMS step; within 1 s of work) still saw it move over its window [t − W, t], the next one (t + P) did not,
    so it stopped by t + P − W. Returns the longest (NaN: never seen moving)."""
    for d, seen in enumerate(watcher.seen):
        values = _after_work(seen, idle_since, window)
        still = state.idle.still_sigma(d)
        if not values or not math.isfinite(still):
            continue
        moving = [t - idle_since for t, v in values if abs(v - values[-1][1]) > 3 * math.sqrt(2) * still]
        delay = state.idle.post_delay[d]
        if moving and max(moving) <= 1.0:
            state.idle.post_delay[d] = max(max(moving) + period - window, delay if math.isfinite(delay) else 0.0)
    return max((x for x in state.idle.post_delay if math.isfinite(x)), default=NAN)


def aim(watcher: RefreshWatcher, not_before: float, target: float | None, earlier: list[Refresh],
        period: float) -> tuple[float, bool]:
    """Wait until ``not_before``, then (if ``target`` is a phase) until the next instant at that
    phase of the refresh grid fitted to the refreshes seen on device 0 — refitted whenever a newer
    refresh shows up. Without any refresh within 2.5 periods, open unaimed. Returns (opening
    time, aimed)."""
    clock = watcher.clock
    while clock.now() < not_before:
        if not watcher.step(min(watcher.poll_s, max(0.0, not_before - clock.now()))):
            return clock.now(), False
    if target is None:
        return clock.now(), False
    give_up = clock.now() + 2.5 * period
    start = clock.now()
    fitted: tuple[int, float, float] | None = None  # (refreshes fitted, reference time, period)
    while True:
        known = list(earlier) + watcher.seen[0]
        now = clock.now()
        if known:
            if fitted is None or fitted[0] != len(known):
                grid = fit_grid(known[-64:], period, 1e-3)
                good = grid.points >= 4 and grid.ref_sigma < grid.period / 8
                fitted = (len(known), grid.t_ref, grid.period) if good else (len(known), known[-1].t, period)
            open_at = next_open(fitted[1], fitted[2], target, start)
            if open_at - now <= watcher.poll_s / 2:
                return now, True
            if not watcher.step(min(watcher.poll_s, open_at - now)):
                return clock.now(), False
            continue
        if now >= give_up or not watcher.step():
            return clock.now(), False


def _trial_energies(state, trials: list[Trial]) -> tuple[list[float], list[tuple[float, float]], float]:
    """Per trial: energy over [a, ext_b] minus post-work idle over the extension; the readings'
    (cv, count per device) inside [a, b]; the extensions' idle uncertainty (J, ≈ 99 %). Two terms:
    the idle tracker's figure for each extension, over the seconds of idle its subtraction can get wrong
    (:func:`_unmatched`) — the idle's own movement, measured anew in each
    trial's tail, so independent between trials: in quadrature over trials — and, where the idle
    moves right after work (a P-state stepping down within the extension), half the range of the
    readings that saw only the extension's idle: the idle subtracted there lies within them, and the
    same step follows every trial (bounded, at full size, added over trials)."""
    power = state.primary
    energies, stats, tracked_sq, moved_j = [], [], 0.0, 0.0
    for trial in trials:
        moved_j += trial.tail_range / 2 * (trial.ext_b - trial.b)
        va, vb, ve = (state.values(trial.anchor_a, power), state.values(trial.anchor_b, power),
                      state.values(trial.anchor_ext, power))
        idle_ext = state.idle.edge_energy(trial.b, trial.ext_b)
        lead, unsettled = pretrial.correction(state, trial, idle_ext)  # the idle before it off the idle after
        moved_j += unsettled
        energy, n, s1, s2 = lead, 0, 0.0, 0.0
        for d in range(state.devices):
            energy += ve[d][HOLD] - va[d][HOLD] - idle_ext[d]
            n += vb[d]["count"][0] - va[d]["count"][0]
            s1 += vb[d]["count"][1] - va[d]["count"][1]
            s2 += vb[d]["count"][2] - va[d]["count"][2]
        mean_r = s1 / n if n else NAN
        cv = math.sqrt(max(s2 / n - mean_r ** 2, 0.0)) / mean_r if n > 1 and mean_r > 0 else 0.0
        stats.append((cv, max(n / state.devices, 1.0)))
        tracked_sq += (state.idle.edge_uncertainty(trial.b, trial.ext_b) * _unmatched(state, trial)) ** 2
        energies.append(energy)
    return energies, stats, math.hypot(math.sqrt(tracked_sq), moved_j)


def _unmatched(state, trial: Trial) -> float:
    """Seconds of idle the extension's subtraction can get wrong (the idle tracker's figure applies to these):
    the held readings count idle before the trial — a weight of ≤ P (a part-time reading), ≈ (W + P)/2 (a
    window of whole updates) — which the post-work readings, seconds later, do not see; the idle after work
    they count is what those readings saw, held unequally (≤ half of the rest, in quadrature)."""
    period, window = state.update_period(state.primary), state.power_window(state.primary)
    length = trial.ext_b - trial.b
    if window is None or not math.isfinite(period):
        return length
    pre = min(length, (max(window, period) + period) / 2)
    return min(length, math.hypot(pre, (length - pre) / 2))


def reading(state, label: str, trials: list[Trial], refreshes: list[Refresh], glitch: str | None = None,
            retries: int = 0, *, action: str | None = None,
            counter_figure: tuple[list[float], float, str] | None = None) -> EnergyReading:
    """Polled trials: held readings over [a, b + W + 1.5 P], idle subtracted over the extension
    (error bound: see the module docstring); with ``counter_figure`` (phases unverified, a counter
    present) the counter's per-trial energies and bound instead (:mod:`.unverified`)."""
    power = state.primary
    state.await_settled(max(t.ext_b for t in trials))
    period, window = state.update_period(power), state.power_window(power)
    p_eff = period if math.isfinite(period) else 0.1
    reason = glitch
    for t in trials:
        reason = reason or state.trouble(power, t.a - (window or p_eff) - p_eff, t.ext_b, hidden_ok=False)[0]
    failed = state.sampler.glitches(power.name, trials[0].watched_from, state.clock.now())[0]
    energies, stats, idle_unc_j = _trial_energies(state, trials)
    if reason is None and not all(math.isfinite(e) for e in energies):
        reason = f"{power.name}: no idle power measured around the trials (needed at the window's edges)"
    seconds = [t.seconds for t in trials]
    powers = [e / s for e, s in zip(energies, seconds)]
    k, measured = len(trials), sum(seconds)
    finite = all(math.isfinite(p) for p in powers) and statistics.mean(powers) > 0
    mean_p = statistics.mean(powers) if finite else NAN
    total = mean_p * measured
    terms = bound_terms(state, trials, refreshes, powers, stats, seconds, mean_p, finite)
    if "mean_p" in terms:  # the trials' powers corrected for their aim offsets (:mod:`.aimoffset`)
        mean_p, total = terms["mean_p"], terms["mean_p"] * measured
    idle_term = idle_unc_j / total if finite and total > 0 and math.isfinite(idle_unc_j) else 0.0
    bound = math.hypot(terms["stat"], terms["runtime"], idle_term) + terms["alias"]  # 99 % terms; aliasing whole
    if counter_figure is not None and reason is None:
        polled_total, (energies, bound, counter_basis) = total, counter_figure
        total, finite = sum(energies), True
        action = (f"phases not verified to tile the update period ({terms['basis']}): the counter's figure for "
                  f"the trials' windows is used (polled estimate {polled_total:.1f} J beside it)")
    durations = [d for t in trials for d in t.durations]
    cv_runs = statistics.stdev(durations) / statistics.mean(durations) if len(durations) > 1 else 0.0
    w_text = f"{window * 1e3:.0f} ms" if window is not None else "unknown (taken as one update)"
    basis = (f"{power.name} polled (update {p_eff * 1e3:.1f} ms, averaging {w_text}, jitter "
             f"{state.sensors[power.name].jitter() * 1e3:.1f} ms), {sum(t.runs for t in trials)} runs in {k} trials "
             f"weighted as mean power per trial, each integrated over its window + averaging window + 1.5 updates "
             f"of idle: {terms['basis']}; run-time weighting {100 * terms['runtime']:.2f} % (runs' cv "
             f"{100 * cv_runs:.0f} %); idle at the edges {100 * idle_term:.2f} %"
             + (f"; {retries} trial(s) rerun after failed polls" if retries else ""))
    if counter_figure is not None and reason is None:
        basis = f"{action}. Bound: {counter_basis}"
    elif action is not None:
        basis = f"{action}. {basis}"
    mode = "polled-trials, counter figure" if counter_figure is not None and reason is None else "polled-trials"
    out = build_reading(state, label, mode, trials, energies, reason, bound, basis,
                        total=total if finite else NAN, failed_polls=failed, phase_gap=terms["gap"],
                        phases_verified=terms["verified"], run_time_cv=cv_runs, phases_action=action)
    release(state.sampler, trials)
    return out
