"""Energy configuration: the one place its defaults live. :class:`EnergyConfig` is the ``energy``
config group's schema (a Hydra structured config stored as ``energy/protocol``, the default: the
protocol of Yang, Adamek & Armour 2023, arXiv 2312.02741, adapted to the source; see
:mod:`harness.energy.counter` and :mod:`harness.energy.polled`). ``conf/energy/naive.yaml`` (the
seeds' method: dsbd App. B, mtad App. D, 1 Hz ``power.draw`` samples summed) and
``off.yaml`` (nothing measured) are presets over it. ``source: simulated`` meters a simulated GPU
described by the ``gpu`` profile's ``simulated`` section (a CPU-only run of the whole path).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

from harness.errors import ConfigError

SOURCES = ("auto", "counter", "power", "power-usage", "smi", "simulated", "none")
INTEGRATIONS = ("trapezoid", "sum")


def option(default, text: str):
    """A dataclass field with its ``help`` (a mutable default copied per instance)."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": text})
    return field(default=default, metadata={"help": text})


@dataclass
class EnergyConfig:
    """One energy configuration (every field's ``help`` says what it does)."""

    name: str = option("protocol", "preset name: protocol (default) | naive | off")
    source: str = option("auto", "auto (NVML energy counter, else NVML power, else nvidia-smi) | counter | power | "
                               "power-usage | smi | simulated | none")
    sample_hz: float = option(50.0, "polling rate of the sampler thread (power, counter, GPU state)")
    integration: str = option("trapezoid", "free windows and the cross-check: trapezoid (over power readings) | "
                                         "sum (the papers' method)")
    skip_unchanged: bool = option(True, "keep a reading only when it changed: one sample per sensor update")
    align_timestamps: bool = option(True, "place a reading mid-way between the polls around its refresh, and "
                                        "mid-way in its averaging window")
    protocol: bool = option(True, "false = one plain window per workload (no alignment, no repetition)")
    target_bound: float = option(0.005, "counter: a run whose expected error bound exceeds this is repeated "
                                      "back to back until it does not (or min_window_s / min_repetitions)")
    min_window_s: float = option(5.0, "repeated measurements: repeat the workload until the measured runs last "
                                    "this long ...")
    min_repetitions: int = option(32, "... or number this many, whichever comes first; energy is divided by the "
                                    "runs")
    trials: int = option(1, "repeated measurements: trials, each a full window, random delays between (part-time "
                          "power: max(this, phase_shifts))")
    trial_delay_s: list[float] = option([0.1, 0.5], "random delay before each trial (seconds, uniform in "
                                                  "[low, high])")
    phase_shifts: int = option(8, "part-time power readings: max(trials, this) trials, opened at evenly spaced "
                                "phases of the update period (Yang: 8)")
    phase_poll_s: float = option(0.001, "poll period used to see sensor refreshes (phase aiming, counter edges)")
    discard_rise_s: float = option(0.0, "runs starting this soon after a trial opens are not measured (0: edges "
                                      "are corrected instead)")
    idle_baseline_s: float = option(1.0, "idle power measured this long when the meter starts (after idle_settle_s)")
    idle_every_s: Optional[float] = option(2.0, "measure idle right after a prompt (one update) when the last such "
                                              "measurement is older than this; null = never")
    idle_settle_s: float = option(2.0, "idle counts as settled this long after work (P-state hysteresis keeps a "
                                     "GPU above its idle floor for a while); net energy subtracts settled idle. "
                                     "0 = idle right after work (not settled)")
    idle_settled_every_s: float = option(60.0, "re-measure settled idle (a wait of idle_settle_s after a prompt) "
                                             "this often; after the first prompt always")
    infer_update_period_s: float = option(1.0, "poll each source every 1 ms this long at start-up to infer its "
                                             "update period, counter resolution and refresh jitter (longer, up "
                                             "to 5x, for a slow sensor); 0 = off")
    self_check: Optional[bool] = option(None, "polled power without a sensor profile for this device and driver "
                                              "(harness-gpu-check): measure the reading's averaging window and lag "
                                              "on one load step of the first prompt's workload (about 3 s); null = "
                                              "on (the default), false = assumed figures")
    cross_check_tolerance: float = option(0.05, "counter vs polled energy: flag a disagreement above this (and "
                                              "above the polled bound)")
    max_gap_s: float = option(5.0, "a source failing without a break this long is given up for the cell (a lost "
                                 "GPU at once); shorter failures are gaps that cost only the windows they touch")
    glitch_retries: int = option(2, "polled trials a failed poll left a sensor refresh unseen in are rerun this "
                                  "many times before the prompt's energy is NaN")
    state_every_s: float = option(0.1, "during the cell, read throttle reasons this often (the GPU's processes "
                                     "every 10th time) to flag the prompts they touch")
    cooldown_s: float = option(0.0, "before a cell, wait at most this long for temperature and idle power to "
                                  "settle; 0 = off")
    cooldown_window_s: float = option(5.0, "... settled = over this long, temperature within "
                                         "cooldown_temperature_c ...")
    cooldown_temperature_c: float = option(1.0, "... degrees ...")
    cooldown_power: float = option(0.02, "... and power within this fraction")
    host: bool = option(True, "also record host CPU package / DRAM energy from RAPL (Linux powercap)")
    powercap_root: str = option("/sys/class/powercap", "where RAPL zones are read")
    keep_samples_s: float = option(10.0, "the sampler keeps this much history; windows keep cumulative values")
    seed: int = option(0, "random trial delays and phases")
    gpu: Any = option("${oc.select:gpu,null}", "the hardware profile (gpu group) in use")

    def __post_init__(self):
        self.trial_delay_s = _delay(self.trial_delay_s)
        self._check()

    def _check(self) -> None:
        def bad(key, valid):
            raise ConfigError(f"energy.{key}={getattr(self, key)!r} is not valid; valid: {valid}", )

        checks = [("source", self.source in SOURCES, ", ".join(SOURCES)),
                  ("integration", self.integration in INTEGRATIONS, ", ".join(INTEGRATIONS)),
                  ("sample_hz", self.sample_hz > 0, "a rate in Hz > 0"),
                  ("trials", self.trials >= 1, "an integer ≥ 1"),
                  ("min_repetitions", self.min_repetitions >= 1, "an integer ≥ 1"),
                  ("phase_shifts", self.phase_shifts >= 1, "an integer ≥ 1 (1 = no phase shifting)"),
                  ("target_bound", 0 < self.target_bound < 1, "a fraction in (0, 1)"),
                  ("phase_poll_s", 0 < self.phase_poll_s <= 0.01, "seconds in (0, 0.01]"),
                  ("cross_check_tolerance", 0 < self.cross_check_tolerance < 1, "a fraction in (0, 1)"),
                  ("idle_every_s", self.idle_every_s is None or self.idle_every_s >= 0,
                   "seconds ≥ 0, or null for never"),
                  ("keep_samples_s", self.keep_samples_s >= 1, "seconds ≥ 1"),
                  ("glitch_retries", self.glitch_retries >= 0, "an integer ≥ 0"),
                  ("max_gap_s", self.max_gap_s > 0, "seconds > 0"),
                  ("state_every_s", self.state_every_s > 0, "seconds > 0"),
                  ("trial_delay_s", 0 <= self.trial_delay_s[0] <= self.trial_delay_s[1],
                   "[low, high] seconds with 0 ≤ low ≤ high")]
        checks += [(f, getattr(self, f) >= 0, "seconds ≥ 0") for f in (
            "min_window_s", "discard_rise_s", "idle_baseline_s", "idle_settle_s", "idle_settled_every_s",
            "infer_update_period_s", "cooldown_s", "cooldown_window_s", "cooldown_temperature_c", "cooldown_power")]
        for key, ok, valid in checks:
            if not ok:
                bad(key, valid)

    @property
    def interval_s(self) -> float:
        return 1.0 / self.sample_hz

    @classmethod
    def from_any(cls, cfg) -> "EnergyConfig":
        """Build from ``None`` (defaults), a dict, an OmegaConf node or an EnergyConfig."""
        if isinstance(cfg, cls):
            return cfg
        if cfg is None:
            return cls(gpu=None)
        if not isinstance(cfg, dict):
            from omegaconf import OmegaConf

            cfg = OmegaConf.to_container(cfg, resolve=True)
        valid = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(cfg) - valid)
        if unknown:
            raise ConfigError(f"unknown energy option(s) {unknown}. Valid options: {', '.join(sorted(valid))}")
        return cls(**{"gpu": None, **cfg})


def _delay(delay) -> tuple[float, float]:
    if isinstance(delay, (int, float)):
        return float(delay), float(delay)
    low, high = (float(x) for x in delay)
    return low, high


def register_energy_schema(cs) -> None:
    """``energy/protocol`` in Hydra's ConfigStore: the default preset and the schema the others extend."""
    cs.store(group="energy", name="protocol", node=EnergyConfig)
