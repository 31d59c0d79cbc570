"""Measuring a workload with the NVML energy counter (Volta and later): how it runs, its reading
and its error bound.

The counter is exact at each of its refreshes (every ~100 ms), to its resolution, some time
behind the GPU (its lag); what needs care is the window's edges:

* **lead**: after a device synchronise the meter polls the counter every millisecond until it
  refreshes — late enough after the synchronise that a lagging counter already holds everything
  before it — and starts the workload at once. The window opens ≤ ~1 ms after a refresh; that
  stretch is idle, at the power of the counter interval just before (measured, not assumed);
* **tail**: after the workload (and a synchronise) it takes the first refresh that has caught up
  with the window's end. Whether a refresh has caught up is tested where the lag is not yet
  known: the interval after it must draw no more than the one after that (a lagging counter
  still shows the end of the work there). Each test narrows the lag down
  (:meth:`~harness.energy.sensors.Sensor.lag_seen`), so later windows seldom wait for it. The
  window's end is that refresh minus the idle energy since ``b``, at the interval's measured power;
* the interval after the tail refresh is the post-work idle measurement (:mod:`harness.energy.idle`),
  and every ``idle_settled_every_s`` the meter then waits for the settled idle.

A run is measured once when its expected error bound (edges, counter resolution) is below
``target_bound``; a shorter run is repeated back to back until it is (or ``min_window_s`` /
``min_repetitions``), over ``trials`` trials. Cost: the edge waits, ~1.5 updates per prompt, and
for sub-second runs at most a few repetitions — predictable (:mod:`harness.energy.cost`).

The bound (99 %, issue 30) is the root sum of squares of independent terms, each from what was
measured: every idle stretch at an edge × the idle's movement between adjacent intervals (:mod:`.idlesteps`),
each refresh's timing × idle power, the counter's steps (gcd of its increments: 0.9 q, two truncations),
the lag's bracket × the edges' idle difference, half an update at the mean power per unaligned edge."""
from __future__ import annotations

import math
from typing import Callable

from harness.energy import afterwork, idlesteps
from harness.energy.crosscheck import polled_estimate
from harness.energy.idle import Z
from harness.energy.phases import Refresh
from harness.energy.readout import build_reading
from harness.energy.reading import EnergyReading
from harness.energy.series import COUNTER
from harness.energy.trials import Runs, Trial, release

NAN = math.nan
# a uniform error on ± h: σ = h/√3, its share of a 99 % bound on a sum of several such terms Z σ (two uniform
# edges' timing sum to a triangle, which ± h √2 would cover only 91 %)
UNIFORM = Z / math.sqrt(3)


def run(state, label: str, workload: Callable) -> tuple[list, EnergyReading, list[Trial]]:
    """Measure ``workload`` with the energy counter (see the module docstring)."""
    cfg, clock = state.cfg, state.clock
    period = state.update_period(state.primary, -1)  # the slowest device's
    timeout = 2.5 * (period if math.isfinite(period) else 0.1) + 0.05
    results: list = []
    trials: list[Trial] = []
    repeat: bool | None = None
    planned = 1
    state.synchronize()
    while len(trials) < planned:
        if trials:
            clock.sleep(state.rng.uniform(*cfg.trial_delay_s))
            state.synchronize()
        trial = Trial(opened=clock.now(), watched_from=clock.now())
        _lead(state, trial, timeout)
        runs = Runs(state, trial, workload, results)
        while True:
            start, end = runs.run(keep_all=repeat is not True)
            if repeat is None:
                repeat = _expected_bound(state, trial, [(start, end)]) > cfg.target_bound
                if repeat:
                    planned = cfg.trials
                    if cfg.discard_rise_s > 0:  # the first run was in the rise: it is not measured
                        runs.drop()
            if runs.kept and (not repeat or runs.enough() or _expected_bound(state, trial, runs.kept)
                              <= cfg.target_bound):
                break
        runs.close()
        _tail(state, trial, timeout)
        trials.append(trial)
    return results, reading(state, label, trials, single=not repeat), trials


def _lead(state, trial: Trial, timeout: float) -> None:
    """Wait for a counter refresh that a lagging counter has already brought up to date with the
    synchronise; note it (and the idle power just before it) on every device."""
    counter, coarse = state.primary, state.coarse()
    lags = []
    for d in range(state.devices):  # every device's own lag: the lead waits for the latest
        sensor = state.device_sensor(counter, d)
        lag_d = _lag_hi(state, sensor, coarse, d)
        lags.append(lag_d if math.isfinite(lag_d) else sensor.lag_lo)
    lag = max(lags)
    need = trial.opened + lag
    watcher = state.watcher(counter)
    deadline = state.clock.now() + timeout + lag
    while state.clock.now() < deadline:
        seen = watcher.seen
        if all(s and s[-1].t >= need for s in seen):
            break
        if not watcher.step():
            break
    state.note(counter, watcher.seen)
    synced, trial.opened = trial.opened, state.clock.now()
    coarse = state.coarse()
    snapshot = state.sampler.snapshot(counter.name)
    for d, seen in enumerate(watcher.seen):
        lead = seen[-1] if seen else None
        trial.lead.append(lead)
        rate, sigma, own = NAN, NAN, NAN
        if lead is not None and not coarse:
            before = [Refresh(t, v, state.cfg.interval_s / 2) for t, v in zip(snapshot[d].times, snapshot[d].values)
                      if t < lead.t - lead.halfwidth - 1e-3 and v < lead.value]
            prev = seen[-2] if len(seen) >= 2 else (before[-1] if before else None)
            if prev is not None and prev.t - prev.halfwidth - lag >= synced:  # the GPU was idle all through it
                rate, sigma = idlesteps.rate(state, prev, lead, d)
                own = idlesteps.own_noise(state, prev, lead, rate)
        trial.lead_own.append(own)
        if not math.isfinite(rate):
            rate, sigma = state.idle.edge_at(trial.opened)[d], state.idle.edge_uncertainty(trial.opened, trial.opened) \
                / Z / math.sqrt(state.devices)
        trial.lead_rate.append(rate)
        trial.lead_sigma.append(sigma)


def _tail(state, trial: Trial, timeout: float) -> None:
    """After the window (GPU idle): the first refresh per device that has caught up with ``b``, the
    post-work idle over the interval after it, and the settled idle when due."""
    counter = state.primary
    b, coarse = trial.b, state.coarse()
    if trial.aligned and not coarse:
        for d in range(state.devices):
            _rise_test(state, trial, d)
    lag_lo = max(state.device_sensor(counter, d).lag_lo for d in range(state.devices))
    settling = state.settled_due()
    idle_due = state.post_idle_due() or settling
    watcher = state.watcher(counter)
    chosen: list[int | None] = [None] * state.devices
    post: list[int | None] = [None] * state.devices
    trial.residue = [0.0] * state.devices
    deadline = state.clock.now() + 2 * timeout + (lag_lo if math.isfinite(lag_lo) else 0.0)
    while state.clock.now() < deadline + (2 * timeout if idle_due else 0.0):  # a post-work idle that moves
        for d, seen in enumerate(watcher.seen):
            if chosen[d] is None:
                chosen[d] = _caught_up(state, state.device_sensor(counter, d), seen, b, coarse, d, trial.residue)
            c = chosen[d]
            if c is not None and idle_due and post[d] is None and not coarse:
                post[d] = idlesteps.post_index(state, seen, c, d, b, len(seen) > c + idlesteps.POST_FLAT + 2,
                                               settling)
        done = all(c is not None and (not idle_due or len(watcher.seen[d]) > c + 2) and
                   (not idle_due or coarse or post[d] is not None) for d, c in enumerate(chosen))
        if done or not watcher.step():
            break
    state.note(counter, watcher.seen)
    rates = []
    for d, seen in enumerate(watcher.seen):
        k = chosen[d] if chosen[d] is not None else (0 if seen else None)
        trial.tail.append(seen[k] if k is not None and k < len(seen) else None)
        rate, sigma = idlesteps.rate(state, seen[k], seen[k + 1], d) \
            if k is not None and len(seen) > k + 1 and not coarse else (NAN, NAN)
        trial.tail_own.append(idlesteps.own_noise(state, seen[k], seen[k + 1], rate)
                              if k is not None and math.isfinite(rate) else NAN)
        rates.append(rate)
        afterwork.note_tail(state, seen, k, b, d, coarse)
        if k is not None and len(seen) > k + 2 and not coarse:  # the idle's movement right after work
            first = len(state.idle.after[d]) < 2  # none known yet: this window's own movement stands in
            idlesteps.from_refreshes(state, counter, d, seen[k:k + 3], after=True)
            lag = state.device_sensor(counter, d).lag_estimate()
            moved = idlesteps.counter_rates(state, counter, seen[k:k + 3])
            if first and all(math.isfinite(m) for m in moved):
                stretch = max(seen[k].t - b - (lag if lag > 0 else 0.0), 0.0)
                trial.residue[d] += UNIFORM * abs(moved[1] - moved[0]) * stretch
        if not math.isfinite(rate):
            rate, sigma = state.idle.edge_at(b)[d], state.idle.edge_uncertainty(b, b) / Z / math.sqrt(state.devices)
        trial.tail_rate.append(rate)
        trial.tail_sigma.append(sigma)
    if idle_due and not coarse:
        idlesteps.read_post(state, watcher.seen, chosen, post, rates)
    elif idle_due and state.idle_channel is not counter:  # a coarse counter: post-work idle from polled power
        state.idle.add_post((b + state.clock.now()) / 2, state.readings_after(state.idle_channel, b))
    if state.settled_due():
        state.settle_idle(b)


def _lag_hi(state, sensor, coarse: bool, device: int = 0) -> float:
    """The longest the counter may lag: as seen, or (a coarse counter whose steps hid the lag so far)
    one update period, assumed — waiting that long costs idle energy only, which the edges subtract."""
    if math.isfinite(sensor.lag_hi) or not coarse:
        return sensor.lag_hi
    period = state.update_period(state.primary, device)
    return max(sensor.lag_lo, period if math.isfinite(period) else 0.1)


def _caught_up(state, sensor, seen: list[Refresh], b: float, coarse: bool, device: int,
               residue: list[float]) -> int | None:
    """Index of the first refresh of ``device`` in ``seen`` known to have caught up with ``b`` (testing
    that device's own lag; what the test could not have seen goes to ``residue[device]``); None: need more."""
    k, lag_hi, test = 0, _lag_hi(state, sensor, coarse, device), True
    while k < len(seen):
        after = seen[k].t - b
        if after - seen[k].halfwidth >= lag_hi:  # (blind: once the interval after it, the tail's rate, is seen)
            return k if len(seen) > k + 1 or not sensor.tails_blind else None
        if after + seen[k].halfwidth <= sensor.lag_lo or sensor.tails_blind and math.isfinite(lag_hi):
            k += 1
            continue
        if len(seen) < k + 3:
            return None
        first, _ = idlesteps.rate(state, seen[k], seen[k + 1], device)
        second, sigma = idlesteps.rate(state, seen[k + 1], seen[k + 2], device)
        # adjacent idle intervals differ by σ (measured RMS, or √2 × each rate's own noise): 3 σ is work showing
        diff = max(sigma, math.sqrt(2) * idlesteps.own_noise(state, seen[k + 1], seen[k + 2], second))
        # behind where a rising edge showed the lag shorter: the idle stepping down after work (P-state), not lag
        behind = first > second + 3 * diff and after < sensor.rise_hi
        # "not behind" hides at most 3 σ of one interval's work energy: the lag known to within that more
        excess = state.mean_power_w / state.devices - second if math.isfinite(state.mean_power_w) else NAN
        interval = seen[k + 1].t - seen[k].t
        slack = 3 * diff * interval / excess if math.isfinite(excess) and excess > 3 * diff else interval
        # a coarse counter's steps may hide a lag: only a clear answer counts (idle intervals known to ± 25 %)
        conclusive = not coarse or behind or (math.isfinite(sigma) and sigma < 0.25 * max(second, 1e-9))
        if test and conclusive:  # behind: work still showing, or the idle stepping down (the rising edge's
            sensor.lag_seen(after if behind else after + slack, behind)  # tests, which cannot mistake it, reset it)
        if not behind and conclusive:
            residue[device] += 3 * diff * interval  # work energy the test could not have seen (J, one-sided)
            return k
        if first > second + 3 * diff and not coarse:  # passed over: the idle moved this much after work (or work
            # still showed: a coarse counter's lag, which its steps hide from the rising edge, is not counted here)
            residue[device] = max(residue[device], UNIFORM * (first - second) * (seen[k + 1].t - b))
        k += 1
    return None


def _rise_test(state, trial: Trial, device: int) -> None:
    """The longest lag the window's rising edge allows, where only the work raises the power: the counter
    interval from the lead refresh to the next, t1, holds t1 − a − lag of work, drawing at most what the
    busiest interval of the window drew; its excess over idle (less 3 σ) bounds the lag from above. (The
    tail's intervals cannot tell a lagging counter from the idle stepping down after work: P-state.)"""
    lead = trial.lead[device] if device < len(trial.lead) else None
    rate_a, sigma = trial.lead_rate[device], trial.lead_sigma[device]
    if lead is None or not math.isfinite(rate_a) or not math.isfinite(sigma):
        return
    series = state.sampler.snapshot(state.primary.name)[device]
    after = [Refresh(t, v, state.cfg.interval_s / 2) for t, v in zip(series.times, series.values)
             if t > lead.t + lead.halfwidth + 1e-3 and v > lead.value]
    if len(after) < 2:
        return
    first = Refresh(lead.t + state.spacing(state.primary, lead, after[0]), after[0].value, after[0].halfwidth)
    if first.t + after[1].halfwidth > trial.b:  # the interval after must lie inside the work
        return
    r1, _ = idlesteps.rate(state, lead, first, device)
    inside = [r for r in after if r.t <= trial.b]
    rates = [r for r in idlesteps.counter_rates(state, state.primary, [first] + inside[1:]) if math.isfinite(r)]
    diff = max(sigma, math.sqrt(2) * idlesteps.own_noise(state, lead, first, r1))
    sensor = state.device_sensor(state.primary, device)
    top = max(rates, default=NAN)
    if not math.isfinite(r1) or not math.isfinite(top) or r1 <= rate_a + 3 * diff or top <= rate_a:
        return
    # the first interval holds (P − lag) of work at most the highest interval's power: lag ≤ P (1 − excess share)
    interval = first.t - lead.t
    hi = (first.t - trial.a) - interval * min((r1 - rate_a - 3 * diff) / (top - rate_a), 1.0)
    sensor.rise_hi = min(sensor.rise_hi, hi)
    sensor.lag_seen(hi, False)


def _expected_bound(state, trial: Trial, kept: list[tuple[float, float]]) -> float:
    """The bound a window holding ``kept`` runs is expected to get (before its tail is seen)."""
    period = state.update_period(state.primary)
    p_eff = period if math.isfinite(period) else 0.1
    idle = sum(state.idle.edge_at(kept[0][0]))
    idle = idle if math.isfinite(idle) else 0.0
    seconds = sum(b - a for a, b in kept)
    mean_w = state.mean_power_w if math.isfinite(state.mean_power_w) else 2 * idle
    lead = trial.lead[0] if trial.lead else None
    snapshot = state.sampler.snapshot(state.primary.name)[0]
    inside = [(t, v) for t, v in zip(snapshot.times, snapshot.values) if lead is not None and t > kept[0][0] + 0.5 * p_eff]
    if lead is not None and inside and inside[-1][0] > lead.t:
        mean_w = max((inside[-1][1] - lead.value) / (inside[-1][0] - lead.t), idle)
    # the edges' idle is measured on the adjacent counter intervals (± the idle's measured movement between
    # intervals; ± 3 % before it is measured) unless the counter is coarse
    step = state.idle.step_sigma()
    unc = state.idle.edge_uncertainty(kept[0][0], kept[-1][1]) if state.coarse() else \
        Z * step if math.isfinite(step) else 0.03 * idle
    q = state.sensors[state.primary.name].resolution_j
    quant = 0.9 * (q if math.isfinite(q) else 1e-3) * math.sqrt(state.devices)
    # no idle known yet: the edges will be interpolated (± half an update at the mean power each)
    edges = unc * p_eff + 2 * 5e-4 * idle if math.isfinite(unc) and idle > 0 else p_eff * mean_w
    energy = mean_w * seconds
    return (edges + quant) / energy if energy > 0 else math.inf


def reading(state, label: str, trials: list[Trial], single: bool) -> EnergyReading:
    """Counter windows: each edge on an observed refresh with the GPU idle between it and the edge
    (idle at the adjacent interval's measured power), else interpolated by the sampler."""
    counter = state.primary
    if any(not t.aligned or any(r is None for r in t.tail) or len(t.tail) < state.devices for t in trials):
        state.await_settled(max(t.b for t in trials), [counter])
    reason = None
    for t in trials:
        first = min((r.t for r in t.lead if r is not None), default=t.a)
        last = max((r.t for r in t.tail if r is not None), default=t.b)
        reason = reason or state.trouble(counter, first - 0.5 * state.cfg.interval_s, last)[0]
    failed = state.sampler.glitches(counter.name, trials[0].watched_from, state.clock.now())[0]
    for series in state.sampler.snapshot(counter.name):  # the counter's steps, from what it showed under load
        state.sensors[counter.name].see_increments([round(1000 * (v1 - v0)) for v0, v1 in zip(series.values,
                                                                                              series.values[1:])])
    energies, terms, edges = [], [], {"aligned": 0, "interpolated": 0}
    for trial in trials:
        energy, e_terms = _trial_energy(state, trial, edges)
        energies.append(energy)
        terms += e_terms
    if reason is None and not all(math.isfinite(e) for e in energies):
        reason = (f"{counter.name}: a window edge is not bracketed by counter updates (window shorter than the "
                  "update period, or at the edge of the readings)")
    if reason is None and any(e < 0 for e in energies):
        reason = f"{counter.name} went backwards inside the window (counter reset or wrap): energy unknown"
    total = sum(energies)
    measured = sum(t.seconds for t in trials)
    mean_w = total / measured if measured > 0 and math.isfinite(total) else NAN
    period = state.update_period(counter)
    p_eff = period if math.isfinite(period) else 0.1
    terms += [0.5 * p_eff * (mean_w if math.isfinite(mean_w) else 0.0)] * edges["interpolated"]
    q = state.sensors[counter.name].resolution_j
    q = q if math.isfinite(q) else 1e-3
    k = len(trials) * state.devices
    # per window and device two truncations: triangular on ± q, 99 % within 0.9 q (several: ≈ normal, σ = q/√6)
    quant = 0.9 * q if k == 1 else Z * q * math.sqrt(k / 6)
    # independent terms, each ≈ 99 %: their root sum of squares (exact for normal terms, wider for bounded ones)
    bound = math.hypot(quant, *terms) / total if math.isfinite(total) and total > 0 else NAN
    runs = [t.runs for t in trials]
    lags = " / ".join(_fmt_ms(state.device_sensor(counter, d).lag_estimate()) for d in range(state.devices))
    updates = " / ".join(f"{state.update_period(counter, d) * 1e3:.0f}" for d in range(state.devices)) \
        if state.devices > 1 else f"{p_eff * 1e3:.0f}"
    basis = (f"NVML energy counter (update {updates} ms, resolution {q:g} J, lag {lags}"
             f"{' per device' if state.devices > 1 else ''}), {'one run' if single else f'{sum(runs)} runs in {len(trials)} trials'}; "
             f"{edges['aligned']} edge(s) on observed refreshes caught up with the window, the GPU idle in between at "
             f"the adjacent interval's measured power; {edges['interpolated']} interpolated (± half an update at the "
             f"mean power); resolution term {quant:.3g} J")
    polled = polled_estimate(state, [(t.anchor_a, t.b) for t in trials]) if state.cross else (NAN, NAN)
    out = build_reading(state, label, "counter-aligned", trials, energies, reason, bound, basis, polled=polled,
                        failed_polls=failed)
    release(state.sampler, trials)
    return out


def _lag_halfwidth(state, sensor, device: int) -> float:
    """How far the lag used may be off: half its bracket, or (not bracketed) up to the longest assumed."""
    if math.isfinite(sensor.lag_hi):
        return (sensor.lag_hi - sensor.lag_lo) / 2
    hi = _lag_hi(state, sensor, state.coarse(), device)
    return max(hi - sensor.lag_lo, 0.0) if math.isfinite(hi) else 0.0


def _trial_energy(state, trial: Trial, edges: dict) -> tuple[float, list[float]]:
    """One trial's energy (devices summed) and its edges' independent error terms (J, each ≈ 99 %; the
    devices' terms of one kind added: their idle may move together).

    With lag λ a refresh at t holds the energy up to t − λ, so the lead's idle stretch (at the rate of
    the interval before it) is a − t_lead + λ long and the tail's t_tail − b − λ, each next to the
    interval whose rate it takes (:meth:`~harness.energy.idle.IdleTracker.stretch_bound`: the idle's measured
    movement on the stretch's and the interval's time scales, Student's 99 % t); each refresh located to ± its
    half-width (uniform: × the rate); the lag to ± :func:`_lag_halfwidth` × the difference of the rates."""
    va, vb = state.values(trial.anchor_a, state.primary), state.values(trial.anchor_b, state.primary)
    energy, terms = 0.0, {"lead": 0.0, "lead timing": 0.0, "tail": 0.0, "tail timing": 0.0, "lag": 0.0}
    for d in range(state.devices):
        sensor = state.device_sensor(state.primary, d)  # every device's own lag
        lag = sensor.lag_estimate() if math.isfinite(sensor.lag_estimate()) else 0.0
        lead = trial.lead[d] if trial.aligned and d < len(trial.lead) else None
        tail = trial.tail[d] if d < len(trial.tail) else None
        rate_a, rate_b = trial.lead_rate[d], trial.tail_rate[d]
        unc = state.idle.edge_uncertainty(trial.a, trial.b) / Z / math.sqrt(state.devices)
        sig_a = trial.lead_sigma[d] if math.isfinite(trial.lead_sigma[d]) else unc
        sig_b = trial.tail_sigma[d] if math.isfinite(trial.tail_sigma[d]) else unc
        both = lead is not None and tail is not None and math.isfinite(rate_a) and math.isfinite(rate_b)
        own = [x[d] if d < len(x) else NAN for x in (trial.lead_own, trial.tail_own)]
        shift = lag if both else 0.0
        if lead is not None and math.isfinite(rate_a):
            start = lead.value + rate_a * (trial.a - lead.t)
            terms["lead"] += afterwork.lead(state, d, trial, lead.t, shift, rate_a, sig_a, own[0])
            terms["lead timing"] += UNIFORM * lead.halfwidth * rate_a
            edges["aligned"] += 1
        else:
            start = va[d][COUNTER]
            edges["interpolated"] += 1
        if tail is not None and math.isfinite(rate_b):
            delta, bound = afterwork.tail(state, d, max(tail.t - trial.b - shift, 0.0), rate_b, sig_b, own[1])
            end = tail.value - rate_b * (tail.t - trial.b) - delta  # less the error a P-state step predicts
            terms["tail"] += bound
            terms["tail timing"] += UNIFORM * tail.halfwidth * rate_b
            terms["tail"] += trial.residue[d] if d < len(trial.residue) else 0.0
            edges["aligned"] += 1
        else:
            end = vb[d][COUNTER]
            edges["interpolated"] += 1
        if both:
            end += lag * (rate_b - rate_a)  # the idle either side of a lagging counter's refreshes
            terms["lag"] += UNIFORM * _lag_halfwidth(state, sensor, d) * abs(rate_b - rate_a)
        energy += end - start
    return energy, list(terms.values())


def _fmt_ms(seconds: float) -> str:  # noqa: D103
    return "not yet seen" if not math.isfinite(seconds) else f"{seconds * 1e3:.0f} ms"
