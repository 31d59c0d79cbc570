"""Energy meters: the seam the runner uses.

``meter.measure(label, workload)`` runs the workload (several times under the protocol) and
returns the results of the measured runs with one :class:`EnergyReading`;
``start_window(label)`` / ``stop_window(handle)`` bracket any region (windows may nest and
overlap). Every window opens and closes after a device synchronise.
"""
from __future__ import annotations

import math
import random
import statistics
import time
from typing import Callable, TypeVar

from harness.energy.config import EnergyConfig
from harness.energy.hardware import UNKNOWN, apply_profile, power_semantics
from harness.energy.protocol import infer_update_periods, phase_delay, run_protocol
from harness.energy.reading import NAN, EnergyReading
from harness.energy.sampler import RealClock, Sampler
from harness.energy.sources import Sources, open_sources
from harness.energy.windows import Window, interval_energy

T = TypeVar("T")


class EnergyMeter:
    """Interface. ``measure`` runs ``workload`` (possibly several times, as a protocol
    requires) and returns the result of every measured run with one reading for them."""

    def measure(self, label: str, workload: Callable[[], T]) -> tuple[list[T], EnergyReading]:
        raise NotImplementedError

    def start_window(self, label: str) -> Window:
        raise NotImplementedError

    def stop_window(self, handle: Window) -> EnergyReading:
        raise NotImplementedError

    def describe(self) -> dict:
        return {}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class NullMeter(EnergyMeter):
    """No power source: run the workload once; energy is NaN with the reason; time is still taken."""

    def __init__(self, reason: str):
        self.reason = reason

    def measure(self, label, workload):
        window = self.start_window(label)
        result = workload()
        return [result], self.stop_window(window)

    def start_window(self, label: str) -> Window:
        return Window(label, time.perf_counter())

    def stop_window(self, handle: Window) -> EnergyReading:
        seconds = time.perf_counter() - handle.start
        return EnergyReading(duration_s=seconds, measured_s=seconds, label=handle.label, reason=self.reason)

    def describe(self) -> dict:
        return {"energy_source": "none", "energy_reason": self.reason}


class GpuEnergyMeter(EnergyMeter):
    """Meters the GPUs behind ``sources`` with a sampler thread; see :mod:`harness.energy.protocol`."""

    def __init__(self, sources: Sources, cfg: EnergyConfig, clock=None, synchronize: Callable[[], None] | None = None):
        self.cfg, self.sources = cfg, sources
        self.clock = clock or RealClock()
        self.synchronize = synchronize or (lambda: None)
        self.rng = random.Random(cfg.seed)
        self.profile_note = self._apply_profile()
        self.primary = sources.counter if cfg.source in ("auto", "counter") and sources.counter else sources.power
        self.cross_check = sources.power if self.primary is sources.counter else None
        if self.primary.kind == "energy":
            self.estimator = "counter"
        else:
            self.estimator = "sum" if cfg.integration == "sum" else "trapezoid"
        channels = [c for c in (self.primary, self.cross_check) if c is not None]
        self.sampler = Sampler(channels, self.clock, cfg.interval_s, cfg.skip_unchanged, cfg.align_timestamps)
        self.update_periods = (infer_update_periods(channels, self.clock, cfg.infer_update_period_s)
                               if cfg.infer_update_period_s > 0 else {})
        self.open_windows: dict[int, Window] = {}
        self.idle_power_w = NAN
        self.sampler.start()
        self.idle_power_w, self.idle_reason = self._idle_baseline()

    # ---- set-up -------------------------------------------------------------------------
    def _apply_profile(self) -> str | None:
        """Use the ``conf/gpu`` profile's power figures if it matches the GPUs in use."""
        profile, power = self.cfg.gpu or {}, self.sources.power
        names = [d.name for d in self.sources.devices]
        match = profile.get("match") or []
        if match and names and not all(any(m.lower() in n.lower() for m in match) for n in names):
            return f"gpu profile '{profile.get('name')}' (matches {match}) does not fit {names}; using detected figures"
        if power is not None:
            if power.semantics == UNKNOWN and profile.get("architecture"):
                power.semantics = power_semantics(profile["architecture"], names[0] if names else "", power.field)
            power.semantics = apply_profile(power.semantics, profile)
        return None

    def _idle_baseline(self) -> tuple[float, str | None]:
        if self.cfg.idle_baseline_s <= 0:
            return NAN, "idle baseline off (energy.idle_baseline_s=0)"
        window = self.start_window("idle baseline")
        self.clock.sleep(self.cfg.idle_baseline_s)
        reading = self.stop_window(window)
        return reading.mean_power_w, reading.reason

    def update_period(self, channel) -> float:
        """Inferred update period of ``channel``, else the documented one, else NaN."""
        inferred = self.update_periods.get(channel.name, NAN)
        if math.isfinite(inferred):
            return inferred
        documented = channel.semantics.update_s if channel.semantics is not None else None
        return documented if documented is not None else NAN

    def phase_delay(self, elapsed_s: float, trial: int) -> float:
        """Extra delay before a trial: phase shifting applies to a part-time power reading only."""
        power = self.primary
        if power.kind != "power" or self.cfg.phase_shifts == 1 or power.semantics is None:
            return 0.0
        update = self.update_period(power)
        window = power.semantics.window_s
        if not math.isfinite(update) or window is None or window >= update:
            return 0.0
        return phase_delay(elapsed_s, trial, min(self.cfg.phase_shifts, self.cfg.trials), update)

    # ---- measuring ------------------------------------------------------------------------
    def measure(self, label, workload):
        if not self.cfg.protocol:
            window = self.start_window(label)
            result = workload()
            return [result], self.stop_window(window)
        results, reading = run_protocol(self, label, workload)
        self._prune()
        return results, reading

    def start_window(self, label: str) -> Window:
        self.synchronize()
        window = Window(label, self.clock.now())
        self.open_windows[id(window)] = window
        return window

    def stop_window(self, handle: Window) -> EnergyReading:
        self.synchronize()
        end = self.clock.now()
        self.open_windows.pop(id(handle), None)
        reading = self.reading(handle.label, [(handle.start, end)], [1])
        self._prune()
        return reading

    def _prune(self) -> None:
        oldest = min((w.start for w in self.open_windows.values()), default=self.clock.now())
        self.sampler.prune(oldest - 1.0)

    def _await_updates_after(self, t: float) -> None:
        """Wait (at most about two update periods) until every live series has a reading after
        ``t``, so the window's end is interpolated rather than held."""
        if self.estimator == "sum":
            return
        for channel in self.sampler.channels:
            period = self.update_period(channel)
            deadline = self.clock.now() + 2 * (period if math.isfinite(period) else 0.1) + 3 * self.cfg.interval_s
            while (self.sampler.latest_time(channel.name) <= t and self.sampler.failure(channel.name) is None
                   and self.clock.now() < deadline):
                self.clock.sleep(self.cfg.interval_s)

    def _energy(self, channel, estimator: str, windows) -> tuple[list[float], int, str | None]:
        """Energy of each window summed over devices, the number of sensor updates inside the
        windows (per device, averaged), and a reason if NaN."""
        devices = self.sampler.snapshot(channel.name)
        update_s = self.update_period(channel)
        energies, updates = [], 0
        for a, b in windows:
            energy = 0.0
            for series in devices:
                part = interval_energy(series, a, b, estimator, self.cfg.interval_s, update_s)
                if part.reason is not None:
                    return [NAN] * len(windows), 0, part.reason
                energy += part.energy_j
                updates += part.updates
            energies.append(energy)
        return energies, round(updates / len(devices)), None

    def _coverage(self, updates: int, measured_s: float) -> float:
        """Fraction of the measured time the readings actually saw (the counter is taken to see all)."""
        if self.primary.kind == "energy":
            return 1.0
        window = self.primary.semantics.window_s if self.primary.semantics is not None else None
        if window is None or measured_s <= 0:
            return NAN
        return min(1.0, updates * window / measured_s)

    def reading(self, label: str, windows: list[tuple[float, float]], runs: list[int]) -> EnergyReading:
        """One reading for measured windows (one per trial) holding ``runs[i]`` runs each."""
        self._await_updates_after(max(b for _, b in windows))
        total_runs = sum(runs)
        measured = sum(b - a for a, b in windows)
        energies, updates, reason = self._energy(self.primary, self.estimator, windows)
        total = sum(energies)
        per_run = total / total_runs
        duration = measured / total_runs
        spread = NAN
        if len(windows) > 1 and reason is None:
            per_run_by_trial = [e / n for e, n in zip(energies, runs)]
            spread = statistics.stdev(per_run_by_trial) / statistics.mean(per_run_by_trial)
        polled = NAN
        if self.cross_check is not None:
            polled = sum(self._energy(self.cross_check, "trapezoid", windows)[0]) / total_runs
        return EnergyReading(
            source=self.primary.name, energy_j=per_run, net_energy_j=per_run - self.idle_power_w * duration,
            total_energy_j=total, mean_power_w=total / measured if measured > 0 else NAN,
            idle_power_w=self.idle_power_w, duration_s=duration, measured_s=measured,
            samples=updates, coverage=self._coverage(updates, measured) if reason is None else NAN,
            repetitions=total_runs, trials=len(windows), trial_spread=spread, polled_energy_j=polled,
            update_period_s=self.update_period(self.primary), label=label, reason=reason)

    # ---- reporting and shutdown --------------------------------------------------------------
    def describe(self) -> dict:
        devices = self.sources.devices
        sem = self.sources.power.semantics if self.sources.power is not None else None
        info = {
            "energy_config": self.cfg.name,
            "energy_source": self.primary.name,
            "energy_estimator": self.estimator,
            "energy_cross_check": self.cross_check.name if self.cross_check else None,
            "energy_gpus": [d.name for d in devices],
            "energy_architecture": sorted({d.architecture for d in devices}),
            "energy_driver": self.sources.driver,
            "energy_sample_hz": self.cfg.sample_hz,
            "energy_idle_power_w": self.idle_power_w,
            "energy_idle_reason": self.idle_reason,
            "energy_power_update_s": sem.update_s if sem else None,
            "energy_power_window_s": sem.window_s if sem else None,
            "energy_power_semantics": sem.note if sem else None,
            "energy_unavailable": dict(self.sources.missing),
            "energy_profile_note": self.profile_note,
            "energy_protocol": self.cfg.protocol,
        }
        info.update({f"energy_update_period_s.{name}": p for name, p in self.update_periods.items()})
        if self.cfg.protocol:
            info.update({f"energy_{k}": getattr(self.cfg, k) for k in (
                "min_window_s", "min_repetitions", "trials", "trial_delay_s", "phase_shifts", "discard_rise_s",
                "idle_baseline_s")})
        return info

    def close(self) -> None:
        self.sampler.stop()
        self.sources.close()


def cuda_synchronizer(cuda_devices: list[int]) -> Callable[[], None]:
    """Waits for queued work on every device in use (so windows bracket the GPU's real work)."""
    import torch

    if not torch.cuda.is_available():
        return lambda: None

    def synchronize() -> None:
        for device in cuda_devices:
            torch.cuda.synchronize(device)

    return synchronize


def make_energy_meter(cfg=None, cuda_devices: list[int] | None = None, *, nvml=None, clock=None,
                      synchronize: Callable[[], None] | None = None) -> EnergyMeter:
    """The meter for one cell: ``cfg`` is the ``energy`` config (dict, OmegaConf node or None for
    the protocol defaults); ``cuda_devices`` the CUDA indices the models use. ``nvml``,
    ``clock`` and ``synchronize`` are for tests (simulated NVML, virtual time)."""
    config = EnergyConfig.from_any(cfg)
    if config.source == "none":
        return NullMeter(f"energy measurement is off (energy={config.name})")
    profile = config.gpu or {}
    if profile.get("power_reading") == "none":
        return NullMeter(f"gpu profile '{profile.get('name')}' has no power reading: {profile.get('notes', '')}")
    if not cuda_devices:
        return NullMeter("no GPU in use: this cell ran on the CPU, which the harness does not meter")
    sources = open_sources(list(cuda_devices), config.source, nvml)
    usable = sources.counter if config.source == "counter" else (sources.counter or sources.power)
    if usable is None:
        sources.close()
        missing = "; ".join(f"{k}: {v}" for k, v in sources.missing.items()) or "no source found"
        return NullMeter(f"no usable power source (energy.source={config.source}) for CUDA devices "
                         f"{list(cuda_devices)}: {missing}")
    return GpuEnergyMeter(sources, config, clock, synchronize or cuda_synchronizer(list(cuda_devices)))
