"""What a measurement reports, and how per-prompt readings add up to a cell's J/token."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

NAN = math.nan


@dataclass
class EnergyReading:
    """Energy of one measured workload. NaN fields, with ``reason`` set, where not measurable.

    ``energy_per_run_j`` (``net_energy_per_run_j``) is per run of the workload (a repeated measurement runs it
    ``repetitions`` times over ``trials`` trials and divides); ``energy_all_runs_j`` covers all measured runs.
    Gross energy is what the GPUs drew; net subtracts idle power tracked through the cell (``idle_power_w`` is
    its mean over the measured time).

    How it was measured and how far off it may be: ``mode`` ("counter-aligned": one or more
    runs whose edges sit on counter refreshes; "counter-window" / "polled-window": a plain
    window; "polled-trials": phase-shifted trials of polled power), ``error_bound`` (expected
    relative error of gross energy, ~95 %), ``net_error_bound`` (the same for net energy: the gross
    bound plus the tracked idle's uncertainty over the window) and ``error_basis`` (why). ``samples`` counts sensor refreshes the
    sampler saw inside the measured time, ``coverage`` the fraction of that time their averaging
    windows covered, ``poll_hz`` the sampler's achieved rate and ``missed_refreshes`` the sensor
    refreshes that fell between two polls unseen. ``phase_gap`` is the largest gap between the
    trials' phases (fraction of the update period) and ``phases_verified`` whether they are known
    to cover it. Where a counter and polled power both exist, ``polled_energy_j`` is the polled
    estimate, ``cross_check_diff`` (polled − counter) ÷ counter and ``cross_check_flag`` True when
    they disagree beyond ``energy.cross_check_tolerance`` and the polled estimate's own bound.
    Host energy (RAPL): ``host_cpu_energy_j`` (packages), ``host_dram_energy_j``,
    ``host_energy_j`` (their sum), ``host_platform_energy_j`` (psys), per run, with
    ``host_reason`` where NaN. ``simulated_exact_*`` are the simulator's exact integrals (only
    with ``energy.source=simulated``).
    """

    source: str = "none"
    energy_per_run_j: float = NAN
    net_energy_per_run_j: float = NAN
    energy_all_runs_j: float = NAN
    mean_power_w: float = NAN
    idle_power_w: float = NAN
    duration_s: float = NAN
    measured_s: float = NAN
    samples: int = 0
    coverage: float = NAN
    repetitions: int = 1
    trials: int = 1
    trial_spread: float = NAN
    polled_energy_j: float = NAN
    update_period_s: float = NAN
    mode: str = "none"
    error_bound: float = NAN
    net_error_bound: float = NAN
    error_basis: str = ""
    poll_hz: float = NAN
    missed_refreshes: float = NAN
    phase_gap: float = NAN
    phases_verified: bool | None = None
    phases_action: str | None = None  # unverified phases: counter figure used, rounds repeated, or wide bound
    cross_check_diff: float = NAN
    cross_check_flag: bool | None = None
    cross_check_suspect: str | None = None
    cross_check_evidence: str | None = None
    idle_definition: str | None = None
    failed_polls: int = 0
    throttled: bool | None = None
    throttle_reasons: str | None = None
    shared: bool | None = None
    other_pids: str | None = None
    counter_resolution_j: float = NAN
    counter_lag_s: float = NAN
    refresh_jitter_s: float = NAN
    run_time_cv: float = NAN
    sensor_semantics: str | None = None
    host_cpu_energy_j: float = NAN
    host_dram_energy_j: float = NAN
    host_energy_j: float = NAN
    host_platform_energy_j: float = NAN
    host_reason: str | None = None
    simulated_exact_energy_j: float = NAN
    simulated_exact_net_energy_j: float = NAN
    label: str = ""
    reason: str | None = None

    @property
    def net_energy_all_runs_j(self) -> float:
        return self.net_energy_per_run_j * self.repetitions

    def as_record(self, new_tokens: int | None = None, prefix: str = "energy.") -> dict:
        """``energy.*`` fields; with ``new_tokens`` (summed over ALL runs ``measure`` returned),
        also gross, net and host J/token."""
        record = {prefix + k: v for k, v in asdict(self).items()}
        if new_tokens is None:
            return record
        per_token = (lambda joules: joules * self.repetitions / new_tokens) if new_tokens else (lambda joules: NAN)
        record[prefix + "tokens_all_runs"] = new_tokens
        record[prefix + "j_per_token"] = self.energy_all_runs_j / new_tokens if new_tokens else NAN
        record[prefix + "net_j_per_token"] = self.net_energy_all_runs_j / new_tokens if new_tokens else NAN
        record[prefix + "host_j_per_token"] = per_token(self.host_energy_j)
        if not new_tokens and self.reason is None:
            record[prefix + "reason"] = "no new tokens: J/token is undefined"
        return record


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and x is not None and math.isfinite(x)


def summarize_records(records: list[dict], prefix: str = "energy.") -> dict:
    """Cell summary from per-prompt records made by :meth:`EnergyReading.as_record`: J/token
    gross and net (total energy ÷ total tokens) with net's share, bound and the "idle-dominated" flag
    (:func:`net_fields`), mean W, sources, mean coverage, the largest
    expected error, prompts whose counter and polled power disagreed, host J/token; NaN with the
    reasons if any prompt was not measured."""
    def get(r, k, default=NAN):  # a record read back from JSON holds null where NaN was written
        v = r.get(prefix + k, default)
        return default if v is None else v
    unmeasured = [r for r in records if not _finite(get(r, "energy_all_runs_j")) or not get(r, "tokens_all_runs")]
    reasons = sorted({get(r, "reason", None) or "not measured" for r in unmeasured})
    tokens = sum(get(r, "tokens_all_runs", 0) or 0 for r in records)
    host = [get(r, "host_energy_j") * get(r, "repetitions", 1) for r in records]
    host_reasons = sorted({get(r, "host_reason", None) for r in records if not _finite(get(r, "host_energy_j"))} - {None})
    bounds = [get(r, "error_bound") for r in records if _finite(get(r, "error_bound"))]
    summary = {
        prefix + "source": ",".join(sorted({get(r, "source", "none") for r in records})) or "none",
        prefix + "prompts_measured": len(records) - len(unmeasured),
        prefix + "prompts": len(records),
        prefix + "max_error_bound": max(bounds) if bounds and len(bounds) == len(records) else NAN,
        prefix + "cross_check_flagged": sum(1 for r in records if get(r, "cross_check_flag", None) is True),
        prefix + "prompts_throttled": sum(1 for r in records if get(r, "throttled", None) is True),
        prefix + "prompts_shared": sum(1 for r in records if get(r, "shared", None) is True),
        prefix + "failed_polls": sum(get(r, "failed_polls", 0) or 0 for r in records),
        prefix + "host_j_per_token": sum(host) / tokens if records and tokens and all(map(_finite, host)) else NAN,
        prefix + "host_reason": "; ".join(host_reasons) if host_reasons else None,
    }
    exact = [get(r, "simulated_exact_energy_j") * get(r, "repetitions", 1) for r in records]
    if records and all(map(_finite, exact)) and tokens:
        summary[prefix + "simulated_exact_j_per_token"] = sum(exact) / tokens
    if unmeasured or not records:
        why = f"{len(unmeasured)} of {len(records)} prompts not measured: " + "; ".join(reasons) if records \
            else "no prompts"
        summary.update({prefix + k: NAN for k in ("j_per_token", "net_j_per_token", "mean_power_w", "coverage",
                                                   "energy_all_runs_j", "idle_power_w", "net_share", "net_error_bound",
                                                   "max_net_error_bound")})
        summary[prefix + "idle_dominated"] = None
        summary[prefix + "net_reason"] = "gross not measured on every prompt"
        summary[prefix + "reason"] = why
        return summary
    total = sum(get(r, "energy_all_runs_j") for r in records)
    nets = [get(r, "net_energy_per_run_j") * get(r, "repetitions", 1) for r in records]
    net = sum(nets)
    seconds = sum(get(r, "measured_s") for r in records)
    idle = [get(r, "idle_power_w") for r in records if _finite(get(r, "idle_power_w"))]
    summary.update({
        prefix + "j_per_token": total / tokens,
        prefix + "net_j_per_token": net / tokens,
        prefix + "mean_power_w": total / seconds if seconds > 0 else NAN,
        prefix + "coverage": sum(get(r, "coverage") for r in records) / len(records),
        prefix + "energy_all_runs_j": total,
        prefix + "idle_power_w": sum(idle) / len(idle) if idle else NAN,
        prefix + "reason": None,
        **net_fields(records, total, nets, get, prefix),
    })
    return summary


IDLE_DOMINATED = 0.10  # net below this share of gross: the GPU mostly idled (a cell's energy says little)


def net_fields(records: list[dict], total: float, nets: list[float], get, prefix: str = "energy.") -> dict:
    """Net beside gross for a cell: the net share of gross, the "idle-dominated" flag (net < 10 % of
    gross), the net bound (prompts' bounds weighted by their net energy: errors all one way) and the
    largest prompt's, and why the net figure is missing where it is."""
    net = sum(nets)
    bounds = [get(r, "net_error_bound") for r in records]
    known = all(map(_finite, nets))
    out = {prefix + "net_share": net / total if known and total > 0 else NAN,
           prefix + "idle_dominated": bool(known and total > 0 and net < IDLE_DOMINATED * total) if known else None,
           prefix + "net_error_bound": sum(b * n for b, n in zip(bounds, nets)) / net
           if known and net > 0 and all(map(_finite, bounds)) else NAN,
           prefix + "max_net_error_bound": max(bounds) if bounds and all(map(_finite, bounds)) else NAN,
           prefix + "net_reason": None}
    if not known:
        out[prefix + "net_reason"] = "no idle power measured for some prompts: net energy unknown"
    elif net <= 0:
        out[prefix + "net_reason"] = "net energy ≤ 0: the measured idle is at or above the cell's power"
    elif not math.isfinite(out[prefix + "net_error_bound"]):
        out[prefix + "net_reason"] = "some prompts state no net bound (net ≤ 0 or idle unknown on them)"
    if out[prefix + "idle_dominated"]:
        out[prefix + "net_reason"] = (f"idle-dominated: net is {100 * net / total:.1f} % of gross; the GPU "
                                      "mostly idled, gross J/token measures the idle more than the method")
    return out
