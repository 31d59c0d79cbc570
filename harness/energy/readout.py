"""The fields every GPU reading shares, whatever protocol measured it: totals and per-run energy,
net energy (settled idle subtracted) and its bound, coverage and poll statistics, the
cross-check verdict, the GPU state seen while the runs ran, host energy, and the simulator's
exact figures where there is one."""
from __future__ import annotations

import math
import statistics

from harness.energy.crosscheck import verdict
from harness.energy.host import GROUPS, HostEnergy, host_delta
from harness.energy.reading import EnergyReading

NAN = math.nan


def host_fields(host: HostEnergy | None, start: dict | None, end: dict | None, runs: int = 1) -> dict:
    """Host energy fields of a reading (per run)."""
    if host is None:
        return {"host_reason": "host energy not measured (energy.host=false)"}
    if not host.available:
        return {"host_reason": host.reason}
    delta = host_delta(start, end)
    cpu, dram = delta["cpu"] / runs, delta["dram"] / runs
    total = cpu + (dram if math.isfinite(dram) else 0.0)
    missing = "; ".join(f"{g}: {host.missing[g]}" for g in ("dram",) if g in host.missing)
    return {"host_cpu_energy_j": cpu, "host_dram_energy_j": dram, "host_energy_j": total,
            "host_platform_energy_j": delta["platform"] / runs,
            "host_reason": (missing or None) if math.isfinite(cpu) else "host energy read failed"}


def _host(state, trials) -> dict:
    runs = sum(t.runs for t in trials)
    host = {g: 0.0 for g in GROUPS}
    for t in trials:
        for g, v in host_delta(t.host_a, t.host_b).items():
            host[g] += v
    return host_fields(state.host, {g: 0.0 for g in GROUPS}, host, runs)


def _polls(state, trials) -> tuple[float, float, float]:
    polls = seen = missed = 0.0
    for t in trials:
        pa = state.sampler.values(t.anchor_a)[state.primary.name]["polls"]
        pb = state.sampler.values(t.anchor_b)[state.primary.name]["polls"]
        polls, seen, missed = polls + pb[0] - pa[0], seen + pb[1] - pa[1], missed + pb[2] - pa[2]
    return polls, seen, missed


def source_name(state) -> str:
    """The energy source a reading names (``energy.source`` in records, ``energy_source`` in the summary): the
    channel read (``nvml-counter``, ...), prefixed ``simulated:`` under ``energy.source=simulated`` (a simulated
    GPU's stand-in NVML), so that provenance never reports a simulated cell as read from a GPU's counter."""
    name = state.primary.name
    return f"simulated:{name}" if getattr(state.cfg, "source", None) == "simulated" else name


def build_reading(state, label: str, mode: str, trials, energies: list[float], reason: str | None, bound: float,
                  basis: str, *, total: float | None = None, polled: tuple[float, float] = (NAN, NAN),
                  failed_polls: int = 0, **extra) -> EnergyReading:
    """One reading from per-trial gross energies (``total`` where the protocol weighs trials itself)."""
    spans = [(t.a, t.b) for t in trials]
    total_runs, measured = sum(t.runs for t in trials), sum(b - a for a, b in spans)
    total = (sum(energies) if total is None else total) if reason is None else NAN
    idle = sum(sum(state.idle.net_energy(a, b)) for a, b in spans)
    idle_unc = sum(state.idle.net_uncertainty(a, b) * (b - a) for a, b in spans)
    powers = [e / t.seconds for e, t in zip(energies, trials) if t.seconds > 0]
    spread = statistics.stdev(powers) / statistics.mean(powers) if len(powers) > 1 and reason is None and \
        all(map(math.isfinite, powers)) and statistics.mean(powers) > 0 else NAN
    polls, seen, missed = _polls(state, trials)
    window, period = state.power_window(state.primary), state.update_period(state.primary)
    if state.primary.kind == "energy":
        coverage = 1.0
    elif window is not None and math.isfinite(period) and measured > 0:
        coverage = min(1.0, seen * min(window, period) / measured)
    else:
        coverage = NAN
    check = verdict(state, total, *polled, work_end=max(b for _, b in spans) if spans else NAN)
    exact = exact_net = NAN
    if state.exact is not None:
        exact = sum(state.exact(a, b) for a, b in spans) / total_runs
        exact_net = sum(state.exact_net(a, b) for a, b in spans) / total_runs if state.exact_net else NAN
    net = total - idle
    net_bound = (bound * total + idle_unc) / net if net > 0 and reason is None and math.isfinite(idle_unc) else NAN
    if math.isfinite(total) and measured > 0:
        state.mean_power_w = total / measured
    return EnergyReading(
        source=source_name(state), energy_per_run_j=total / total_runs, net_energy_per_run_j=net / total_runs,
        energy_all_runs_j=total, mean_power_w=total / measured if measured > 0 else NAN,
        idle_power_w=idle / measured if measured > 0 else NAN, duration_s=measured / total_runs,
        measured_s=measured, samples=round(seen) if math.isfinite(seen) else 0,
        coverage=coverage if reason is None else NAN, repetitions=total_runs, trials=len(spans),
        trial_spread=spread, polled_energy_j=polled[0] / total_runs, update_period_s=period, mode=mode,
        error_bound=bound if reason is None else NAN, net_error_bound=net_bound, error_basis=basis,
        poll_hz=polls / measured if measured > 0 else NAN, missed_refreshes=missed, failed_polls=failed_polls,
        idle_definition=state.idle.definition(), simulated_exact_energy_j=exact,
        simulated_exact_net_energy_j=exact_net, label=label, reason=reason, **check, **_host(state, trials),
        **state.flags(spans), **state.sensor_fields(), **extra)
