"""Energy configuration (Hydra group ``conf/energy``): which power source, how fast to
sample, and the measurement protocol of Yang, Adamek & Armour 2023 (arXiv 2312.02741) as
adapted to the source (see :mod:`harness.energy.protocol`).

The defaults here are those of ``conf/energy/protocol.yaml``; ``naive.yaml`` is the seeds'
method (seed 000 App. B, seed 002 App. D: 1 Hz ``power.draw`` samples, summed),
``off.yaml`` measures nothing, and ``source: simulated`` meters a simulated GPU described by
the ``gpu`` profile's ``simulated`` section (a CPU-only run of the whole path).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from harness.errors import ConfigError

SOURCES = ("auto", "counter", "power", "power-usage", "smi", "simulated", "none")
INTEGRATIONS = ("trapezoid", "sum")


@dataclass(frozen=True)
class EnergyConfig:
    """One energy configuration. See ``conf/energy/protocol.yaml`` for what each field does."""

    name: str = "protocol"
    source: str = "auto"
    sample_hz: float = 50.0
    integration: str = "trapezoid"
    skip_unchanged: bool = True
    align_timestamps: bool = True
    protocol: bool = True
    counter_min_periods: int = 10
    min_window_s: float = 5.0
    min_repetitions: int = 32
    trials: int = 1
    trial_delay_s: tuple[float, float] = (0.1, 0.5)
    phase_shifts: int = 8
    phase_poll_s: float = 0.001
    discard_rise_s: float = 0.0
    idle_baseline_s: float = 1.0
    idle_every_s: float | None = 2.0
    infer_update_period_s: float = 1.0
    cross_check_tolerance: float = 0.05
    cooldown_s: float = 0.0
    cooldown_window_s: float = 5.0
    cooldown_temperature_c: float = 1.0
    cooldown_power: float = 0.02
    host: bool = True
    powercap_root: str = "/sys/class/powercap"
    keep_samples_s: float = 10.0
    seed: int = 0
    gpu: dict | None = None

    def __post_init__(self):
        def bad(field, value, valid):
            raise ConfigError(f"energy.{field}={value!r} is not valid; valid: {valid}")

        if self.source not in SOURCES:
            bad("source", self.source, ", ".join(SOURCES))
        if self.integration not in INTEGRATIONS:
            bad("integration", self.integration, ", ".join(INTEGRATIONS))
        if not self.sample_hz > 0:
            bad("sample_hz", self.sample_hz, "a rate in Hz > 0")
        if self.trials < 1:
            bad("trials", self.trials, "an integer ≥ 1")
        if self.min_repetitions < 1:
            bad("min_repetitions", self.min_repetitions, "an integer ≥ 1")
        if self.phase_shifts < 1:
            bad("phase_shifts", self.phase_shifts, "an integer ≥ 1 (1 = no phase shifting)")
        if self.counter_min_periods < 1:
            bad("counter_min_periods", self.counter_min_periods, "an integer ≥ 1")
        if not 0 < self.phase_poll_s <= 0.01:
            bad("phase_poll_s", self.phase_poll_s, "seconds in (0, 0.01]")
        if not 0 < self.cross_check_tolerance < 1:
            bad("cross_check_tolerance", self.cross_check_tolerance, "a fraction in (0, 1)")
        if self.idle_every_s is not None and self.idle_every_s < 0:
            bad("idle_every_s", self.idle_every_s, "seconds ≥ 0, or null for never")
        if self.keep_samples_s < 1:
            bad("keep_samples_s", self.keep_samples_s, "seconds ≥ 1")
        lo, hi = self.trial_delay_s
        if not 0 <= lo <= hi:
            bad("trial_delay_s", self.trial_delay_s, "[low, high] seconds with 0 ≤ low ≤ high")
        for f in ("min_window_s", "discard_rise_s", "idle_baseline_s", "infer_update_period_s", "cooldown_s",
                  "cooldown_window_s", "cooldown_temperature_c", "cooldown_power"):
            if getattr(self, f) < 0:
                bad(f, getattr(self, f), "seconds ≥ 0")

    @property
    def interval_s(self) -> float:
        return 1.0 / self.sample_hz

    @classmethod
    def from_any(cls, cfg) -> "EnergyConfig":
        """Build from ``None`` (defaults), a dict, an OmegaConf node or an EnergyConfig."""
        if isinstance(cfg, cls):
            return cfg
        if cfg is None:
            return cls()
        if not isinstance(cfg, dict):
            from omegaconf import OmegaConf

            cfg = OmegaConf.to_container(cfg, resolve=True)
        valid = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(cfg) - valid)
        if unknown:
            raise ConfigError(f"unknown energy option(s) {unknown}. Valid options: {', '.join(sorted(valid))}")
        values = dict(cfg)
        if "trial_delay_s" in values:
            delay = values["trial_delay_s"]
            values["trial_delay_s"] = (float(delay), float(delay)) if isinstance(delay, (int, float)) else tuple(delay)
        return cls(**values)
