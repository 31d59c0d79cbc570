"""A simulated NVML over a known power waveform, in virtual time, for tests and benchmarks.

:class:`SimGPU` holds the true power: piecewise constant (idle, or the pieces of a workload)
plus a small sinusoidal ripple, so its exact integral is known at any time. Its readings
behave as GUIDE §2 describes for A100/H100: the power fields report the average of the last
``power_window_s`` (25 ms), refreshed every ``power_update_s`` (100 ms); the energy counter
(mJ) is refreshed at its own period. :class:`SimulatedNVML` exposes them under pynvml's names
(and raises pynvml's own ``NVMLError``), so :mod:`harness.energy.sources` runs unchanged on it.
:class:`SimClock` is virtual time: ``sleep`` advances it and fires the sampler's polls.
"""
from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass
from types import SimpleNamespace

import pynvml


@dataclass
class _Timer:
    due: float
    period: float
    fn: object
    clock: "SimClock"

    def stop(self) -> None:
        if self in self.clock.timers:
            self.clock.timers.remove(self)


class SimClock:
    """Virtual time. ``sleep`` advances it, running due periodic callbacks in time order."""

    def __init__(self, start: float = 0.0):
        self.t = start
        self.timers: list[_Timer] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        target = self.t + max(0.0, seconds)
        while self.timers:
            timer = min(self.timers, key=lambda tm: tm.due)
            if timer.due > target:
                break
            self.t = max(self.t, timer.due)
            timer.due += timer.period
            timer.fn()
        self.t = target

    def periodic(self, period_s: float, fn) -> _Timer:
        timer = _Timer(self.t + period_s, period_s, fn, self)
        self.timers.append(timer)
        return timer


class SimGPU:
    """One simulated GPU: a known power waveform and sensor readings derived from it."""

    def __init__(self, clock, *, name: str = "NVIDIA H100 80GB HBM3", architecture: int = pynvml.NVML_DEVICE_ARCH_HOPPER,
                 idle_w: float = 70.0, ripple_w: float = 1.0, ripple_period_s: float = 0.173,
                 power_update_s: float = 0.1, power_window_s: float = 0.025, power_phase_s: float = 0.0371,
                 usage_window_s: float | None = None, counter_update_s: float = 0.1, counter_phase_s: float = 0.0123,
                 has_counter: bool = True, has_instant: bool = True, uuid: str = "GPU-00000000-sim0",
                 power_limit_w: float = 700.0):
        self.clock, self.name, self.architecture, self.uuid = clock, name, architecture, uuid
        self.power_limit_w = power_limit_w
        self.idle_w, self.ripple_w, self.ripple_period_s = idle_w, ripple_w, ripple_period_s
        self.power_update_s, self.power_window_s, self.power_phase_s = power_update_s, power_window_s, power_phase_s
        self.usage_window_s = usage_window_s if usage_window_s is not None else power_window_s
        self.counter_update_s, self.counter_phase_s = counter_update_s, counter_phase_s
        self.has_counter, self.has_instant = has_counter, has_instant
        self.t0 = clock.now()
        self.breaks, self.levels, self.cumulative = [self.t0], [idle_w], [0.0]

    # ---- the true waveform ----------------------------------------------------------------
    def _base_energy(self, t: float) -> float:
        i = max(bisect.bisect_right(self.breaks, t) - 1, 0)
        return self.cumulative[i] + self.levels[i] * (t - self.breaks[i])

    def energy(self, t: float) -> float:
        """Exact energy (J) from creation to ``t``."""
        phase = 2 * math.pi * (t - self.t0) / self.ripple_period_s
        return self._base_energy(t) + self.ripple_w * self.ripple_period_s / (2 * math.pi) * (1 - math.cos(phase))

    def _set_level(self, t: float, watts: float) -> None:
        if t == self.breaks[-1]:
            self.levels[-1] = watts
            return
        self.cumulative.append(self._base_energy(t))
        self.breaks.append(t)
        self.levels.append(watts)

    def hold(self, watts: float) -> None:
        """Draw ``watts`` from now on (until the next :meth:`hold` or :meth:`run`), without advancing time."""
        self._set_level(self.clock.now(), watts)

    def run(self, pieces: list[tuple[float, float]]) -> float:
        """Draw ``pieces`` = [(seconds, watts), ...] from now, advancing the clock through them;
        return the exact energy they took (J)."""
        start = t = self.clock.now()
        for seconds, watts in pieces:
            self._set_level(t, watts)
            t += seconds
        self._set_level(t, self.idle_w)
        self.clock.sleep(t - self.clock.now())
        return self.energy(t) - self.energy(start)

    # ---- sensor readings -----------------------------------------------------------------
    def _last_update(self, t: float, period: float, phase: float) -> float:
        return phase + math.floor((t - phase) / period) * period

    def averaged_power(self, t: float, window_s: float) -> float:
        tk = self._last_update(t, self.power_update_s, self.t0 + self.power_phase_s)
        return (self.energy(tk) - self.energy(tk - window_s)) / window_s

    def counter_mj(self, t: float) -> int:
        tk = self._last_update(t, self.counter_update_s, self.t0 + self.counter_phase_s)
        return 10**9 + math.floor(self.energy(tk) * 1000)


class SimulatedNVML:
    """The subset of pynvml that :mod:`harness.energy.sources` uses, over :class:`SimGPU` s."""

    NVMLError = pynvml.NVMLError

    def __init__(self, gpus: list[SimGPU], clock, driver: str = "550.54.15"):
        self.gpus, self.clock, self.driver = gpus, clock, driver
        self.failure: tuple[float, int] | None = None
        self.init_count = self.shutdown_count = 0

    def __getattr__(self, name: str):
        if name.startswith("NVML_"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def fail_at(self, t: float, code: int = pynvml.NVML_ERROR_GPU_IS_LOST) -> None:
        """From virtual/real time ``t`` on, every device call raises ``NVMLError(code)``."""
        self.failure = (t, code)

    def _gpu(self, handle) -> SimGPU:
        if self.failure is not None and self.clock.now() >= self.failure[0]:
            raise pynvml.NVMLError(self.failure[1])
        return self.gpus[handle]

    def nvmlInit(self):
        self.init_count += 1

    def nvmlShutdown(self):
        self.shutdown_count += 1

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int):
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str):
        for i, gpu in enumerate(self.gpus):
            if gpu.uuid == uuid:
                return i
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle):
        return self._gpu(handle).uuid

    def nvmlDeviceGetArchitecture(self, handle):
        return self._gpu(handle).architecture

    def nvmlDeviceGetPowerManagementLimit(self, handle) -> int:
        return round(1000 * self._gpu(handle).power_limit_w)

    def nvmlDeviceGetPowerUsage(self, handle) -> int:
        gpu = self._gpu(handle)
        return round(1000 * gpu.averaged_power(self.clock.now(), gpu.usage_window_s))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle) -> int:
        gpu = self._gpu(handle)
        if not gpu.has_counter:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.counter_mj(self.clock.now())

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        gpu = self._gpu(handle)
        now = self.clock.now()
        values = []
        for field_id in field_ids:
            supported = field_id == pynvml.NVML_FI_DEV_POWER_INSTANT and gpu.has_instant
            milliwatts = round(1000 * gpu.averaged_power(now, gpu.power_window_s)) if supported else 0
            values.append(SimpleNamespace(
                fieldId=field_id, scopeId=0, timestamp=int(now * 1e6), latencyUsec=0,
                valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                nvmlReturn=pynvml.NVML_SUCCESS if supported else pynvml.NVML_ERROR_NOT_SUPPORTED,
                value=SimpleNamespace(uiVal=milliwatts)))
        return values


def llm_like_load(rng: random.Random, seconds: float) -> list[tuple[float, float]]:
    """Bursty power pieces for one simulated generation of about ``seconds``: a prefill burst,
    then decode steps (kernel bursts and short gaps) with occasional host-side stalls."""
    pieces = [(rng.uniform(0.02, 0.06), rng.uniform(350, 450))]
    total = pieces[0][0]
    while total < seconds:
        if rng.random() < 0.02:
            piece = (rng.uniform(0.01, 0.04), rng.uniform(90, 120))
        elif len(pieces) % 2:
            piece = (rng.uniform(0.003, 0.015), rng.uniform(250, 420))
        else:
            piece = (rng.uniform(0.001, 0.006), rng.uniform(90, 160))
        pieces.append(piece)
        total += piece[0]
    return pieces
