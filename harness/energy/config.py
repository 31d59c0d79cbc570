"""Energy configuration (Hydra group ``conf/energy``): which power source, how fast to
sample, and the measurement protocol of Yang, Adamek & Armour 2023 (arXiv 2312.02741).

The defaults here are those of ``conf/energy/protocol.yaml``; ``naive.yaml`` is the seeds'
method (seed 000 App. B, seed 002 App. D: 1 Hz ``power.draw`` samples, summed) and
``off.yaml`` measures nothing.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from harness.errors import ConfigError

SOURCES = ("auto", "counter", "power", "power-usage", "smi", "none")
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
    min_window_s: float = 5.0
    min_repetitions: int = 32
    trials: int = 4
    trial_delay_s: tuple[float, float] = (0.1, 0.5)
    phase_shifts: int = 8
    discard_rise_s: float = 0.2
    idle_baseline_s: float = 5.0
    infer_update_period_s: float = 1.0
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
        lo, hi = self.trial_delay_s
        if not 0 <= lo <= hi:
            bad("trial_delay_s", self.trial_delay_s, "[low, high] seconds with 0 ≤ low ≤ high")
        for f in ("min_window_s", "discard_rise_s", "idle_baseline_s", "infer_update_period_s"):
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
