"""How a workload is measured, adapted to the source: the protocol of Yang, Adamek & Armour 2023
("Part-time Power Measurements: nvidia-smi's Lack of Attention", arXiv 2312.02741; GUIDE §2)
where it is needed, and no more than that.

**With an NVML energy counter** (Volta and later) the counter is exact at each of its
refreshes (every ~100 ms), so what needs care is only the edges of the window:

* the meter synchronises the device, polls the counter every millisecond until it refreshes,
  and starts the workload at once: the window opens ≤ ~1 ms after a refresh, and that stretch
  is idle (energy = idle power × gap);
* after the workload (and a synchronise) it polls until the next refresh, the GPU idle in
  between: the window's end is that refresh minus idle power × gap;
* it then waits one more refresh: one update period of idle GPU, the idle measurement that
  tracks idle drift through the cell (:mod:`harness.energy.idle`).

A run that spans at least ``counter_min_periods`` counter updates (1 s at 100 ms) is measured
once: no repetitions, the cost is the ~0.2 s of edge waits. A shorter run is repeated
(back-to-back runs until ``min_window_s`` or ``min_repetitions``, ``trials`` trials), so that the
edges' assumptions weigh little. The old way — scale the counter rise between the first and last
refreshes inside the window to the window's length — filled the edges with the window's mean
power (−0.3 to −0.4 % when a window opens on a prefill plateau).

**With polled power only** Yang's protocol is kept — ``trials`` trials of runs lasting
``min_window_s`` or ``min_repetitions`` — with three changes:

* phases are aimed from a refresh seen just before each trial, and measured afterwards
  (:mod:`harness.energy.phases`), instead of being counted from the first trial with a period
  known only to a millisecond;
* edges: each trial is preceded by ≥ W + P of idle and followed by ≥ W + 1.5 P of idle (W the
  sensor's averaging window, P its update period) and integrates the held readings over
  [a, b + W + 1.5 P] minus idle over the extension. A reading averages the W before its refresh,
  so every reading that saw any of the window is counted once and none of the idle around it;
  for 1 s-averaged ``power.draw`` this removes the −1.0 to −1.8 % bias of integrating over
  [a, b] with shifted timestamps (the following idle leaking into averaged readings);
* the power rise is measured rather than discarded (``discard_rise_s: 0``): a prompt in a sweep
  starts from idle, and its rise is part of what it costs.

Every reading states its expected error bound and what it rests on (``error_bound``,
``error_basis``), built in :mod:`harness.energy.meter`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from harness.energy.phases import Refresh, RefreshWatcher, next_open
from harness.energy.sampler import Anchor

T = TypeVar("T")
NAN = math.nan


def infer_update_periods(channels, clock, duration_s: float, poll_s: float = 0.001,
                         seen: dict | None = None) -> dict[str, float]:
    """Median time between changes of each device's value while polling every ``poll_s`` for
    ``duration_s``, per channel the median over its devices (NaN with fewer than three changes).
    ``seen`` (channel name → list) receives device 0's changes as :class:`Refresh` es."""
    changes = {(c.name, i): [] for c in channels for i in range(len(c.handles))}
    last: dict[tuple[str, int], float] = {}
    polled: dict[str, float] = {}
    end = clock.now() + duration_s
    while clock.now() < end:
        for channel in channels:
            try:
                values = channel.read()
            except Exception:  # an unreadable channel simply yields no period; the sampler reports the error
                continue
            now = clock.now()
            for key, value in zip(((channel.name, i) for i in range(len(values))), values):
                if key in last and value != last[key]:
                    changes[key].append(now)
                    if seen is not None and key[1] == 0:
                        before = polled.get(channel.name, now)
                        seen.setdefault(channel.name, []).append(Refresh((before + now) / 2, value, (now - before) / 2))
                last[key] = value
            polled[channel.name] = now
        clock.sleep(poll_s)
    periods = {}
    for channel in channels:
        per_device = [statistics.median(b - a for a, b in zip(times, times[1:]))
                      for (name, _), times in changes.items() if name == channel.name and len(times) >= 3]
        periods[channel.name] = statistics.median(per_device) if per_device else math.nan
    return periods


def phase_delay(elapsed_s: float, trial: int, phases: int, update_s: float, offset: float = 0.0) -> float:
    """Delay until trial ``trial`` is at phase (offset + (trial mod phases)/phases) of the update
    period, ``elapsed_s`` after an observed refresh (Yang et al. good practice 1)."""
    target = ((offset + (trial % phases) / phases) % 1.0) * update_s
    return (target - elapsed_s) % update_s


@dataclass
class Trial:
    """One trial: its window [a, b], the runs it holds, and what is known about its edges."""

    opened: float
    a: float = NAN
    b: float = NAN
    runs: int = 0
    lead: list[Refresh | None] = field(default_factory=list)   # counter refresh just before ``a`` (idle between)
    tail: list[Refresh | None] = field(default_factory=list)   # first counter refresh after ``b`` (idle between)
    aligned: bool = False      # ``a`` is the first run's start, right after ``lead``
    aimed: bool = False        # polled: opened at a phase aimed from an observed refresh
    anchor_a: Anchor | None = None
    anchor_b: Anchor | None = None
    ext_b: float = NAN         # polled: end of the edge-exact integration
    anchor_ext: Anchor | None = None
    host_a: dict | None = None
    host_b: dict | None = None
    phase: float = NAN         # polled part-time: phase of ``opened`` in the sensor's update period
    phase_sigma_s: float = math.inf


class Runs:
    """Runs of the workload in one trial, back to back; which are kept and when to stop."""

    def __init__(self, meter, trial: Trial, workload: Callable[[], T], results: list[T]):
        self.meter, self.trial, self.workload, self.results = meter, trial, workload, results
        self.kept: list[tuple[float, float]] = []
        self.first = True

    def run(self, keep_all: bool = False) -> tuple[float, float]:
        host = self.meter.host_read()
        start, result, end, anchor = self.meter.run_once(self.workload, anchor=True)
        if keep_all or start - self.trial.opened >= self.meter.cfg.discard_rise_s:
            if not self.kept:
                self.trial.aligned = self.first
                self.trial.a = start
                self.trial.anchor_a = anchor
                self.trial.host_a = host
                anchor = None
            self.kept.append((start, end))
            self.results.append(result)
        if anchor is not None:
            self.meter.sampler.release(anchor)
        self.first = False
        return start, end

    def enough(self) -> bool:
        cfg = self.meter.cfg
        return bool(self.kept) and (sum(b - a for a, b in self.kept) >= cfg.min_window_s - 1e-9
                                    or len(self.kept) >= cfg.min_repetitions)

    def close(self) -> None:
        trial, meter = self.trial, self.meter
        trial.b = self.kept[-1][1]
        trial.runs = len(self.kept)
        trial.host_b = meter.host_read()
        trial.anchor_b = meter.sampler.anchor(trial.b)


def run_counter(meter, label: str, workload: Callable[[], T]):
    """Measure ``workload`` with the energy counter (see the module docstring)."""
    cfg, clock, counter = meter.cfg, meter.clock, meter.primary
    period = meter.update_period(counter)
    timeout = 2.5 * period + 0.05 if math.isfinite(period) else 0.5
    results: list[T] = []
    trials: list[Trial] = []
    single: bool | None = None
    planned = 1
    meter.synchronize()
    while len(trials) < planned:
        if trials:
            clock.sleep(meter.rng.uniform(*cfg.trial_delay_s))
            meter.synchronize()
        lead = RefreshWatcher(counter, clock, cfg.phase_poll_s).until_refreshes(1, timeout)
        meter.note_refreshes(counter, lead)
        trial = Trial(opened=clock.now(), lead=[s[0] if s else None for s in lead])
        runs = Runs(meter, trial, workload, results)
        while True:
            start, end = runs.run(keep_all=bool(single) or single is None)
            if single is None:
                long_enough = (end - start >= cfg.counter_min_periods * period if math.isfinite(period)
                               else end - start >= cfg.min_window_s)
                single = long_enough
                if not single:
                    planned = cfg.trials
                    if cfg.discard_rise_s > 0:  # the first run was in the rise: it is not measured
                        runs.kept.clear()
                        results.pop()
                        meter.sampler.release(trial.anchor_a)
                        trial.anchor_a = None
            if single or runs.enough():
                break
        runs.close()
        tail = meter.watch_tail(counter, trial.b, timeout)
        meter.note_refreshes(counter, tail)
        trial.tail = [s[0] if s else None for s in tail]
        trials.append(trial)
    return results, meter.counter_reading(label, trials, single=bool(single)), trials


def run_polled(meter, label: str, workload: Callable[[], T]):
    """Measure ``workload`` with polled power: phase-aimed trials, edge-exact integration."""
    cfg, clock, power = meter.cfg, meter.clock, meter.primary
    period, window = meter.update_period(power), meter.power_window(power)
    p_eff = period if math.isfinite(period) else 0.1
    w_eff = window if window is not None else p_eff
    shifting = meter.phase_shifting()
    n_trials = max(cfg.trials, cfg.phase_shifts) if shifting else cfg.trials
    phases = min(cfg.phase_shifts, n_trials)
    offset = meter.rng.random()
    refreshes: list[Refresh] = []  # device 0's refreshes seen during this measurement
    results: list[T] = []
    trials: list[Trial] = []
    meter.synchronize()
    idle_since = clock.now()
    for k in range(n_trials):
        watcher = RefreshWatcher(power, clock, cfg.phase_poll_s)
        not_before = clock.now() + max(meter.rng.uniform(*cfg.trial_delay_s), w_eff + p_eff)
        target = None
        if shifting:
            target = (offset + (k % phases) / phases) % 1.0
            if k > 0 and not trials[0].aimed:  # trial 0 opened unaimed: aim the others relative to it
                first, _ = meter.trial_phase(trials[0], refreshes)
                if math.isfinite(first):
                    target = (first + (k % phases) / phases) % 1.0
        aim_period, _ = meter.refined_period(power, refreshes)
        opened, aimed = aim(watcher, not_before, target, refreshes, aim_period)
        refreshes.extend(watcher.seen[0])
        trial = Trial(opened=opened, aimed=aimed)
        meter.idle_from_watch(watcher, idle_since, p_eff, w_eff)
        runs = Runs(meter, trial, workload, results)
        while True:
            runs.run()
            if runs.enough():
                break
        runs.close()
        # every reading whose averaging window touched [a, b] is in, however late the sampler saw it
        lag = max(meter.sampler.max_poll_gap(power.name, trial.a) - cfg.interval_s, 0.0)
        trial.ext_b = trial.b + w_eff + 1.5 * p_eff + lag
        trial.anchor_ext = meter.sampler.anchor(trial.ext_b)
        tail = RefreshWatcher(power, clock, cfg.phase_poll_s)
        deadline = trial.ext_b + 3 * p_eff + 0.1
        while not (clock.now() >= trial.ext_b and meter.sampler.settled(trial.ext_b)) and clock.now() < deadline:
            if not tail.step():
                break
        refreshes.extend(tail.seen[0])
        meter.idle_from_watch(tail, trial.b, p_eff, w_eff)
        idle_since = trial.b
        trials.append(trial)
    return results, meter.polled_reading(label, trials, refreshes), trials


def aim(watcher: RefreshWatcher, not_before: float, target: float | None, earlier: list[Refresh],
        period: float) -> tuple[float, bool]:
    """Wait until ``not_before``, then (if ``target`` is a phase) until the next instant at that
    phase after the latest refresh seen on device 0 — re-aiming whenever a newer refresh shows up.
    Without any refresh within 2.5 periods, open unaimed. Returns (opening time, aimed)."""
    clock = watcher.clock
    while clock.now() < not_before:
        if not watcher.step(min(watcher.poll_s, max(0.0, not_before - clock.now()))):
            return clock.now(), False
    if target is None:
        return clock.now(), False
    give_up = clock.now() + 2.5 * period
    start = clock.now()
    while True:
        known = watcher.seen[0] or earlier
        now = clock.now()
        if known:
            # the first instant at the target phase from ``start`` on, from the latest refresh seen
            open_at = next_open(known[-1].t, period, target, start)
            if open_at - now <= watcher.poll_s / 2:
                return now, True
            if not watcher.step(min(watcher.poll_s, open_at - now)):
                return clock.now(), False
            continue
        if now >= give_up or not watcher.step():
            return clock.now(), False
