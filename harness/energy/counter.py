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

The bound (≈ 95 %) adds: the idle power's uncertainty times each edge's idle stretch, each
refresh's timing (± half a 1 ms poll) times idle power, the counter's resolution (measured:
0.78 Q for one window, the difference of two truncations), half an update at the mean power per
edge that could not be aligned, and the lag's residue where the counter was seen lagging.
"""
from __future__ import annotations

import math
from typing import Callable

from harness.energy.crosscheck import polled_estimate
from harness.energy.phases import Refresh
from harness.energy.readout import build_reading
from harness.energy.reading import EnergyReading
from harness.energy.series import COUNTER
from harness.energy.trials import Runs, Trial, release

NAN = math.nan


def _rate(state, first: Refresh, second: Refresh) -> tuple[float, float]:
    """Mean power between two refreshes of one device, and its uncertainty (± W)."""
    spacing = state.spacing(state.primary, first, second)
    if spacing <= 0:
        return NAN, NAN
    q = state.sensors[state.primary.name].resolution_j
    watts = (second.value - first.value) / spacing
    if watts < 0 or watts > 5 * (state.power_limit_w() if math.isfinite(state.power_limit_w()) else 2000.0):
        return NAN, NAN  # a counter that went backwards (reset, wrap) or jumped
    timing = (first.halfwidth + second.halfwidth) / spacing if spacing != second.t - first.t else 0.0
    return watts, abs(watts) * timing + (q if math.isfinite(q) else 1e-3) / spacing + 0.02 * abs(watts)


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
        rate, sigma = NAN, NAN
        if lead is not None and not coarse:
            before = [Refresh(t, v, state.cfg.interval_s / 2) for t, v in zip(snapshot[d].times, snapshot[d].values)
                      if t < lead.t - lead.halfwidth - 1e-3 and v < lead.value]
            prev = seen[-2] if len(seen) >= 2 else (before[-1] if before else None)
            if prev is not None and prev.t - prev.halfwidth - lag >= synced:  # the GPU was idle all through it
                rate, sigma = _rate(state, prev, lead)
        if not math.isfinite(rate):
            rate, sigma = state.idle.edge_at(trial.opened)[d], NAN
        trial.lead_rate.append(rate)
        trial.lead_sigma.append(sigma)


def _tail(state, trial: Trial, timeout: float) -> None:
    """After the window (GPU idle): the first refresh per device that has caught up with ``b``, the
    post-work idle over the interval after it, and the settled idle when due."""
    counter = state.primary
    b, coarse = trial.b, state.coarse()
    lag_lo = max(state.device_sensor(counter, d).lag_lo for d in range(state.devices))
    idle_due = state.post_idle_due() or state.settled_due()
    watcher = state.watcher(counter)
    chosen: list[int | None] = [None] * state.devices
    deadline = state.clock.now() + 2 * timeout + (lag_lo if math.isfinite(lag_lo) else 0.0)
    while state.clock.now() < deadline:
        for d, seen in enumerate(watcher.seen):
            if chosen[d] is None:
                chosen[d] = _caught_up(state, state.device_sensor(counter, d), seen, b, coarse, d)
        done = all(c is not None and (not idle_due or len(watcher.seen[d]) > c + 1) for d, c in enumerate(chosen))
        if done or not watcher.step():
            break
    state.note(counter, watcher.seen)
    rates = []
    for d, seen in enumerate(watcher.seen):
        k = chosen[d] if chosen[d] is not None else (0 if seen else None)
        trial.tail.append(seen[k] if k is not None and k < len(seen) else None)
        rate, sigma = _rate(state, seen[k], seen[k + 1]) if k is not None and len(seen) > k + 1 and not coarse \
            else (NAN, NAN)
        rates.append(rate)
        if not math.isfinite(rate):
            rate, sigma = state.idle.edge_at(b)[d], NAN
        trial.tail_rate.append(rate)
        trial.tail_sigma.append(sigma)
    if idle_due and all(math.isfinite(r) for r in rates):
        times = [(watcher.seen[d][chosen[d]].t + watcher.seen[d][chosen[d] + 1].t) / 2 for d in range(state.devices)]
        state.idle.add_post(sum(times) / len(times), rates)
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


def _caught_up(state, sensor, seen: list[Refresh], b: float, coarse: bool, device: int) -> int | None:
    """Index of the first refresh of ``device`` in ``seen`` known to have caught up with ``b`` (testing
    that device's own lag); None: need more."""
    k, lag_hi, test = 0, _lag_hi(state, sensor, coarse, device), True
    while k < len(seen):
        after = seen[k].t - b
        if after - seen[k].halfwidth >= lag_hi:
            return k
        if after + seen[k].halfwidth <= sensor.lag_lo:
            k += 1
            continue
        if len(seen) < k + 3:
            return None
        first, _ = _rate(state, seen[k], seen[k + 1])
        second, sigma = _rate(state, seen[k + 1], seen[k + 2])
        behind = first > second + 2 * sigma
        # a coarse counter's steps may hide a lag: only a clear answer counts (idle intervals known to ± 25 %)
        conclusive = not coarse or behind or (math.isfinite(sigma) and sigma < 0.25 * max(second, 1e-9))
        if test and conclusive:
            sensor.lag_seen(after, behind)
        if not behind and conclusive:
            return k
        k += 1
    return None


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
    # the edges' idle is measured on the adjacent counter intervals (± ~2-3 %) unless the counter is coarse
    unc = state.idle.edge_uncertainty(kept[0][0], kept[-1][1]) if state.coarse() else 0.03 * idle
    q = state.sensors[state.primary.name].resolution_j
    quant = 0.78 * (q if math.isfinite(q) else 1e-3) * state.devices
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
    energies, err, edges = [], 0.0, {"aligned": 0, "interpolated": 0}
    for trial in trials:
        energy, e_err = _trial_energy(state, trial, edges)
        energies.append(energy)
        err += e_err
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
    err += edges["interpolated"] * 0.5 * p_eff * (mean_w if math.isfinite(mean_w) else 0.0)
    q = state.sensors[counter.name].resolution_j
    q = q if math.isfinite(q) else 1e-3
    k = len(trials) * state.devices
    quant = q * (0.78 if k == 1 else 2 * math.sqrt(k / 6))
    bound = (err + quant) / total if math.isfinite(total) and total > 0 else NAN
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


def _trial_energy(state, trial: Trial, edges: dict) -> tuple[float, float]:
    """One trial's energy (devices summed) and its edges' error (J)."""
    va, vb = state.values(trial.anchor_a, state.primary), state.values(trial.anchor_b, state.primary)
    energy, err = 0.0, 0.0
    for d in range(state.devices):
        lag = state.device_sensor(state.primary, d).lag_estimate()  # every device's own
        lag = lag if math.isfinite(lag) else 0.0
        lead = trial.lead[d] if trial.aligned and d < len(trial.lead) else None
        tail = trial.tail[d] if d < len(trial.tail) else None
        rate_a, rate_b = trial.lead_rate[d], trial.tail_rate[d]
        unc = state.idle.edge_uncertainty(trial.a, trial.b)
        sig_a = trial.lead_sigma[d] if math.isfinite(trial.lead_sigma[d]) else unc / state.devices
        sig_b = trial.tail_sigma[d] if math.isfinite(trial.tail_sigma[d]) else unc / state.devices
        if lead is not None and math.isfinite(rate_a):
            start = lead.value + rate_a * (trial.a - lead.t)
            err += (trial.a - lead.t) * sig_a + lead.halfwidth * rate_a
            edges["aligned"] += 1
        else:
            start = va[d][COUNTER]
            edges["interpolated"] += 1
        if tail is not None and math.isfinite(rate_b):
            end = tail.value - rate_b * (tail.t - trial.b)
            err += (tail.t - trial.b) * sig_b + tail.halfwidth * rate_b
            edges["aligned"] += 1
        else:
            end = vb[d][COUNTER]
            edges["interpolated"] += 1
        if lead is not None and tail is not None and math.isfinite(rate_a) and math.isfinite(rate_b):
            end += lag * (rate_b - rate_a)  # the idle either side of a lagging counter's refreshes
            err += lag * (sig_a + sig_b)
        energy += end - start
    return energy, err


def _fmt_ms(seconds: float) -> str:
    return "not yet seen" if not math.isfinite(seconds) else f"{seconds * 1e3:.0f} ms"
