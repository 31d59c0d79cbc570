"""The measurement protocol of Yang, Adamek & Armour 2023 ("Part-time Power Measurements:
nvidia-smi's Lack of Attention", arXiv 2312.02741; GUIDE §2), as configuration:

1. a window long enough to average over many sensor updates: repeat the workload until the
   measured runs last ``min_window_s`` (5 s) or number ``min_repetitions`` (32), and divide;
   where the power reading averages less time than passes between updates, open successive
   trials at evenly spaced phases of the update period (min(``phase_shifts``, ``trials``)
   phases; the paper used 8 delays): four 25 ms looks into a 100 ms period tile it;
2. ``trials`` (4) trials with random delays between them;
3. discard the power rise at the start (runs that begin within ``discard_rise_s`` of a trial's
   start) and align power timestamps with the workload (done by the sampler);
plus an idle-power baseline (gross and net energy) and the update periods of the counter and
power field, inferred by fast polling.
"""
from __future__ import annotations

import math
import statistics
from typing import Callable, TypeVar

from harness.energy.reading import EnergyReading

T = TypeVar("T")


def infer_update_periods(channels, clock, duration_s: float, poll_s: float = 0.001) -> dict[str, float]:
    """Median time between changes of each device's value while polling every ``poll_s`` for
    ``duration_s``, per channel the median over its devices (NaN with fewer than three changes)."""
    changes = {(c.name, i): [] for c in channels for i in range(len(c.handles))}
    last: dict[tuple[str, int], float] = {}
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
                last[key] = value
        clock.sleep(poll_s)
    periods = {}
    for channel in channels:
        per_device = [statistics.median(b - a for a, b in zip(times, times[1:]))
                      for (name, _), times in changes.items() if name == channel.name and len(times) >= 3]
        periods[channel.name] = statistics.median(per_device) if per_device else math.nan
    return periods


def phase_delay(elapsed_s: float, trial: int, phases: int, update_s: float) -> float:
    """Extra delay so that trial ``trial`` opens at phase (trial mod phases)/phases of the power
    field's update period, counted from the first trial's opening (Yang et al. good practice 1)."""
    target = (trial % phases) / phases * update_s
    return (target - elapsed_s) % update_s


def run_protocol(meter, label: str, workload: Callable[[], T]) -> tuple[list[T], EnergyReading]:
    """Run ``workload`` under the protocol on ``meter`` (a :class:`GpuEnergyMeter`). Returns the
    results of the measured runs only (runs in the discarded rise are dropped) and one reading
    whose ``energy_j`` is per run.

    Runs within a trial follow each other without gaps and the trial is measured as one window
    from its first kept run to its last: an idle gap inside a window would have its low
    readings smeared into the neighbouring runs by 100 ms sampling. The phase-shifting delays
    therefore go between trials, on top of the random delays.
    """
    cfg, clock = meter.cfg, meter.clock
    results: list[T] = []
    windows: list[tuple[float, float]] = []
    runs: list[int] = []
    first_opened = None
    for trial in range(cfg.trials):
        delay = meter.rng.uniform(*cfg.trial_delay_s)
        if first_opened is not None:
            delay += meter.phase_delay(clock.now() + delay - first_opened, trial)
        clock.sleep(delay)
        meter.synchronize()
        opened = clock.now()
        first_opened = opened if first_opened is None else first_opened
        kept: list[tuple[float, float]] = []
        while True:
            start = clock.now()
            result = workload()
            meter.synchronize()
            end = clock.now()
            if start - opened >= cfg.discard_rise_s:
                kept.append((start, end))
                results.append(result)
            if kept and (sum(b - a for a, b in kept) >= cfg.min_window_s or len(kept) >= cfg.min_repetitions):
                break
        windows.append((kept[0][0], kept[-1][1]))
        runs.append(len(kept))
    return results, meter.reading(label, windows, runs)
