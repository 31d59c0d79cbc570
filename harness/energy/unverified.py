"""What the polled protocol (:mod:`.polled`) does where its trials' phases cannot be verified to
tile a phase-shifted reading's update period (issue 30 item 3): instead of widening the bound by
the aliasing a part-time reading can suffer (the unseen share × idle-to-limit, 60-200 %),

* where the GPU has an energy counter (``energy.source=power`` chosen on a GPU that has one), the
  counter's figure for each trial's window is used — read at idle before the trial opens and after
  its tail, the idle at both edges subtracted — with a bound from the error sources that apply:
  the counter's step at each read, each read's staleness (up to one counter update) of idle power,
  the counter's lag times the difference between the idle before and after (the lag itself
  cancels between two idle edges), and the edges' idle uncertainty;
* without a counter, the round of trials is repeated at fresh phases (at most ``PHASE_REPEATS``
  more rounds) until one verifies; only if none does is the wide bound stated, with the reason.

The record says which happened (``energy.phases_action``)."""
from __future__ import annotations

import math

NAN = math.nan
PHASE_REPEATS = 2  # further rounds of trials at fresh phases before the wide bound is stated


def counter_channel(state):
    """The GPU's energy counter where the primary reading is polled power and a counter exists."""
    counter = getattr(state.sources, "counter", None)
    return counter if counter is not None and counter is not state.primary else None


def read_counter(counter) -> tuple[list[float], str | None]:
    """(joules per device, why not) — a failed read leaves the counter figure out."""
    try:
        return list(counter.read()), None
    except Exception as exc:  # noqa: BLE001 — any read failure means: no counter figure for this window
        return [], f"{counter.name} read failed ({type(exc).__name__}: {exc})"


def counter_figure(state, counter, trials, reads: list[tuple[float, list[float], float, list[float]]]
                   ) -> tuple[list[float], float, str] | None:
    """Per trial energy from the counter reads (t0, J0 before it opened; t1, J1 after its tail), the
    bound (fraction of the total) and its basis; None where a read is missing or went backwards."""
    if len(reads) != len(trials) or any(not r[1] or not r[3] for r in reads):
        return None
    sem = counter.semantics
    update = sem.update_s if sem is not None and sem.update_s else 0.1
    lag = sem.lag_s if sem is not None and sem.lag_s is not None else update  # unmeasured: up to one update
    step = getattr(sem, "resolution_j", None) or 0.001  # NVML's counter counts millijoules
    energies, quant, stale, lag_j, idle_j = [], 0.0, 0.0, 0.0, 0.0
    for trial, (t0, j0, t1, j1) in zip(trials, reads):
        if any(b < a for a, b in zip(j0, j1)):
            return None  # wrapped or reset inside the window
        before = state.idle.edge_energy(t0, trial.a)
        after = state.idle.edge_energy(trial.b, t1)
        if not all(map(math.isfinite, before + after)):
            return None
        energies.append(sum(j1) - sum(j0) - sum(before) - sum(after))
        p0, p1 = sum(state.idle.edge_at(t0)), sum(state.idle.edge_at(t1))
        quant += 2 * step * len(j0)
        stale += max(p0, p1) * update          # each read stale by up to one update, of idle power
        lag_j += abs(p1 - p0) * lag            # the lag shifts both idle edges: only their difference counts
        idle_j += state.idle.edge_uncertainty(t0, t1) * ((trial.a - t0) + (t1 - trial.b))
    total = sum(energies)
    if not total > 0:
        return None
    parts = {"counter steps": quant, "read staleness": stale, "lag × idle difference": lag_j, "edge idle": idle_j}
    bound = sum(parts.values()) / total
    basis = ", ".join(f"{k} {100 * v / total:.3f} %" for k, v in parts.items())
    return energies, bound, (f"{counter.name} over each trial's window (read at idle before it and after its "
                             f"tail, edge idle subtracted; update {update * 1e3:.0f} ms, lag "
                             f"{'assumed ≤ one update' if sem is None or sem.lag_s is None else f'{lag * 1e3:.0f} ms'}"
                             f"): {basis}")
