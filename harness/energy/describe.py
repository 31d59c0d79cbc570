"""What a GPU meter is and knows, for a cell's summary (``energy_meter``): sources, protocol, the
sensors as measured on this machine, idle, the protocol's settings."""
from __future__ import annotations


def describe_meter(state) -> dict:
    from harness.energy.readout import source_name

    cfg, sources = state.cfg, state.sources
    sem = sources.power.semantics if sources.power is not None else None
    counter = state.primary.kind == "energy"
    info = {
        "energy_config": cfg.name,
        "energy_source": source_name(state),
        "energy_estimator": "counter" if counter else ("sum" if cfg.integration == "sum" else "trapezoid"),
        "energy_mode": ("counter: one run per prompt with edges on counter refreshes while its expected bound is "
                        f"≤ {cfg.target_bound:g}, else repeated" if counter else
                        "polled power: phase-aimed trials, edges integrated over the averaging window")
        if cfg.protocol else "one plain window per workload",
        "energy_cross_check": state.cross.name if state.cross else None,
        "energy_gpus": [d.name for d in sources.devices],
        "energy_architecture": sorted({d.architecture for d in sources.devices}),
        "energy_driver": sources.driver,
        "energy_sample_hz": cfg.sample_hz,
        "energy_idle_power_w": state.idle_power_w,
        "energy_idle_reason": state.idle_reason,
        "energy_idle_measurements": len(state.idle),
        "energy_idle_definition": state.idle.definition(),
        "energy_power_update_s": sem.update_s if sem else None,
        "energy_power_window_s": sem.window_s if sem else None,
        "energy_power_semantics": sem.note if sem else None,
        "energy_unavailable": dict(sources.missing),
        "energy_profile_note": state.profile_note,
        "energy_protocol": cfg.protocol,
        "energy_simulated": state.exact is not None,
        "energy_failed_polls": {name: log.total for name, log in state.sampler.gaps.items()},
        **{f"energy_{k}": v for k, v in state.cooldown.items()},
        **(state.host.describe() if state.host is not None else {"host_energy_reason": "energy.host=false"}),
    }
    for name, sensor in state.sensors.items():
        info.update({f"energy_sensor.{name}.{k}": v for k, v in sensor.describe().items()})
        info[f"energy_update_period_s.{name}"] = sensor.inferred_update_s
    if state.watch is not None:
        info["energy_state_samples"] = state.watch.ticks
    if cfg.protocol:
        info.update({f"energy_{k}": getattr(cfg, k) for k in (
            "target_bound", "min_window_s", "min_repetitions", "trials", "trial_delay_s", "phase_shifts",
            "discard_rise_s", "idle_baseline_s", "idle_every_s", "idle_settle_s", "idle_settled_every_s")})
    return info
