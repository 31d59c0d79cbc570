"""A simulated NVML over a known power waveform, for tests, studies and CPU-only runs.

:class:`SimGPU` holds the true power — piecewise-constant levels (idle, or a workload's pieces), a
ripple, an idle drift or wander, other processes' power, P-state hysteresis (``hysteresis_w`` above
the floor for ``hysteresis_s`` after work) — so its exact integral is known at any time. Its
readings follow GUIDE §2 (Yang, Adamek & Armour 2023): power fields average the last
``power_window_s`` (25 ms on A100/H100; ``nvmlDeviceGetPowerUsage`` 1 s on Hopper, else
``usage_window_s``), refreshed every ``power_update_s`` (possibly inexact, and jittered); the energy counter (mJ) has its own period, resolution, lag and jitter, and may wrap or be reset. It
reports clocks, temperature, power limit, throttle reasons (while busy), persistence mode and the
processes on the GPU. :class:`SimulatedNVML` exposes all that under pynvml's names and errors, so
:mod:`harness.energy.sources` runs unchanged on it; it fails on demand: from a time on
(``fail_at``: a lost GPU), in bursts (``glitch``) or on a fraction of calls (``error_rate``).
:class:`SimClock` is virtual time (a minute of measurement takes milliseconds). Load shapes:
:mod:`harness.energy.simloads`; a GPU drawing power while the meter's workload runs
(``energy.source=simulated``): :mod:`harness.energy.simworkload`.

This module imports nothing from the harness, so a study can load it next to an older meter.
"""
from __future__ import annotations

import bisect
import math
import random
import threading
from dataclasses import dataclass
from types import SimpleNamespace

import pynvml

MASK64 = (1 << 64) - 1


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
    """Virtual time. ``sleep`` advances it, running due periodic callbacks in time order.

    ``stall(until, period)`` makes periodic callbacks late until ``until`` (each fires at most
    every ``period``): a sampler thread starved of the GIL by a busy decoding thread."""

    def __init__(self, start: float = 0.0):
        self.t = start
        self.timers: list[_Timer] = []
        self.stall_until, self.stall_period = -math.inf, 0.0

    def now(self) -> float:
        return self.t

    def stall(self, until: float, period: float) -> None:
        self.stall_until, self.stall_period = until, period

    def sleep(self, seconds: float) -> None:
        target = self.t + max(0.0, seconds)
        while self.timers:
            timer = min(self.timers, key=lambda tm: tm.due)
            if timer.due > target:
                break
            self.t = max(self.t, timer.due)
            step = timer.period
            if self.t < self.stall_until:
                step = max(step, self.stall_period)
            timer.due += step
            timer.fn()
        self.t = target

    def periodic(self, period_s: float, fn) -> _Timer:
        timer = _Timer(self.t + period_s, period_s, fn, self)
        self.timers.append(timer)
        return timer


def _unit(k: int, salt: int) -> float:
    """A deterministic pseudo-random number in [-1, 1] for refresh ``k`` (splitmix64)."""
    z = (k * 0x9E3779B97F4A7C15 + salt * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return ((z ^ (z >> 31)) / MASK64) * 2.0 - 1.0


def last_refresh(t: float, period: float, phase: float, jitter: float = 0.0, salt: int = 0) -> float:
    """Time of the latest refresh at or before ``t`` of a sensor refreshed every ``period`` from
    ``phase``, each refresh moved by up to ± ``jitter`` (< period / 2)."""
    k = math.floor((t - phase) / period)
    if not jitter:
        return phase + k * period
    for kk in (k + 1, k, k - 1):
        tk = phase + kk * period + jitter * _unit(kk, salt)
        if tk <= t:
            return tk
    return phase + (k - 2) * period


class SimGPU:
    """One simulated GPU: a known power waveform and sensor readings derived from it."""

    def __init__(self, clock, *, name: str = "NVIDIA H100 80GB HBM3", architecture: int = pynvml.NVML_DEVICE_ARCH_HOPPER,
                 idle_w: float = 70.0, ripple_w: float = 1.0, ripple_period_s: float = 0.173,
                 power_update_s: float = 0.1, power_window_s: float = 0.025, power_phase_s: float = 0.0371,
                 usage_window_s: float | None = None, power_jitter_s: float = 0.0,
                 counter_update_s: float = 0.1, counter_phase_s: float = 0.0123, counter_resolution_j: float = 0.001,
                 counter_lag_s: float = 0.0, counter_jitter_s: float = 0.0, counter_bits: int | None = None,
                 counter_start_mj: int = 10**9, has_counter: bool = True, has_instant: bool = True,
                 uuid: str = "GPU-00000000-sim0", power_limit_w: float = 700.0,
                 idle_ramp_w_per_s: float = 0.0, idle_wave_w: float = 0.0, idle_wave_period_s: float = 600.0,
                 idle_wave_phase: float = 0.0, hysteresis_w: float = 0.0, hysteresis_s: float = 0.0,
                 ambient_c: float = 30.0, thermal_c_per_w: float = 0.12, thermal_tau_s: float = 20.0,
                 sm_clocks_mhz: tuple[int, int] = (345, 1980), mem_clocks_mhz: tuple[int, int] = (1593, 2619),
                 persistence_mode: int = 1):
        self.clock, self.name, self.architecture, self.uuid = clock, name, architecture, uuid
        self.power_limit_w = power_limit_w
        self.idle_w, self.ripple_w, self.ripple_period_s = idle_w, ripple_w, ripple_period_s
        self.power_update_s, self.power_window_s, self.power_phase_s = power_update_s, power_window_s, power_phase_s
        hopper = architecture == pynvml.NVML_DEVICE_ARCH_HOPPER  # power.draw: a 1 s running average (NVML docs)
        self.usage_window_s = usage_window_s if usage_window_s is not None else (1.0 if hopper else power_window_s)
        self.power_jitter_s = power_jitter_s
        self.counter_update_s, self.counter_phase_s = counter_update_s, counter_phase_s
        self.counter_resolution_j, self.counter_lag_s = counter_resolution_j, counter_lag_s
        self.counter_jitter_s, self.counter_bits, self.counter_start_mj = counter_jitter_s, counter_bits, counter_start_mj
        self.counter_reset_at: float | None = None
        self.has_counter, self.has_instant = has_counter, has_instant
        self.idle_ramp_w_per_s, self.idle_wave_w = idle_ramp_w_per_s, idle_wave_w
        self.idle_wave_period_s, self.idle_wave_phase = idle_wave_period_s, idle_wave_phase
        self.hysteresis_w, self.hysteresis_s = hysteresis_w, hysteresis_s
        self.ambient_c, self.thermal_c_per_w, self.thermal_tau_s = ambient_c, thermal_c_per_w, thermal_tau_s
        self.sm_clocks_mhz, self.mem_clocks_mhz = sm_clocks_mhz, mem_clocks_mhz
        self.persistence_mode = persistence_mode
        self.throttle_reasons_active = 0  # e.g. pynvml.nvmlClocksThrottleReasonSwPowerCap: reported while busy
        self.processes: list[SimpleNamespace] = []  # other processes on this GPU for its whole life
        self.foreign: list[tuple[float, float, float, SimpleNamespace]] = []  # (start, end, watts, process)
        self.t0 = clock.now()
        self.breaks, self.levels, self.cumulative, self.kinds = [self.t0], [idle_w], [0.0], ["idle"]
        self.lock = threading.Lock()  # a real-time sampler thread reads while the workload sets levels

    # ---- the true waveform ----------------------------------------------------------------
    def _base_energy(self, t: float) -> float:
        if t < self.t0:  # before creation: idle at the nominal level
            return self.idle_w * (t - self.t0)
        i = max(bisect.bisect_right(self.breaks, t) - 1, 0)
        return self.cumulative[i] + self.levels[i] * (t - self.breaks[i])

    def _drift_energy(self, t: float) -> float:  # ∫ from t0 to t of the idle drift (ramp + sine) and ripple
        x = t - self.t0
        e = self.idle_ramp_w_per_s * x * x / 2
        if self.idle_wave_w:
            w = 2 * math.pi / self.idle_wave_period_s
            e += self.idle_wave_w / w * (math.cos(self.idle_wave_phase) - math.cos(w * x + self.idle_wave_phase))
        phase = 2 * math.pi * x / self.ripple_period_s
        return e + self.ripple_w * self.ripple_period_s / (2 * math.pi) * (1 - math.cos(phase))

    def _foreign_energy(self, t: float) -> float:
        return sum(w * max(0.0, min(t, end) - max(self.t0, start)) for start, end, w, _ in self.foreign)

    def energy(self, t: float) -> float:
        """Exact energy (J) from creation to ``t``."""
        with self.lock:
            return self._base_energy(t) + self._drift_energy(t) + self._foreign_energy(t)

    def idle_power(self, t: float) -> float:
        """What the GPU draws at ``t`` when idle and settled (nominal idle + drift + ripple)."""
        x = t - self.t0
        wave = self.idle_wave_w * math.sin(2 * math.pi * x / self.idle_wave_period_s + self.idle_wave_phase)
        ripple = self.ripple_w * math.sin(2 * math.pi * x / self.ripple_period_s)
        return self.idle_w + self.idle_ramp_w_per_s * x + wave + ripple

    def net_energy(self, a: float, b: float) -> float:
        """Exact energy above the settled idle over [a, b] (what net energy should report), without
        other processes' energy."""
        with self.lock:
            return self._base_energy(b) - self._base_energy(a) - self.idle_w * (b - a)

    def level(self, t: float) -> float:
        with self.lock:
            return self.levels[max(bisect.bisect_right(self.breaks, t) - 1, 0)]

    def _append(self, t: float, watts: float, kind: str) -> None:
        if t == self.breaks[-1]:
            self.levels[-1], self.kinds[-1] = watts, kind
            return
        self.cumulative.append(self._base_energy(t))
        self.breaks.append(t)
        self.levels.append(watts)
        self.kinds.append(kind)

    def _set_level(self, t: float, watts: float) -> None:
        kind = "idle" if watts <= self.idle_w + 1.0 else "work"
        with self.lock:
            i = bisect.bisect_right(self.breaks, t)
            before, start = self.kinds[i - 1], self.breaks[i - 1]
            if i < len(self.breaks):  # drop levels scheduled after t (a workload ended early)
                del self.breaks[i:], self.levels[i:], self.cumulative[i:], self.kinds[i:]
            if kind == "idle" and self.hysteresis_s > 0 and before in ("work", "hyst"):
                # P-state hysteresis: the clocks stay up for a while after work
                begin = t if before == "work" else start
                if before == "work":
                    self._append(t, self.idle_w + self.hysteresis_w, "hyst")
                self._append(max(begin + self.hysteresis_s, t), watts, "idle")
                return
            self._append(t, watts, kind)

    def hold(self, watts: float) -> None:
        """Draw ``watts`` from now on (until the next :meth:`hold` or :meth:`run`), without advancing time."""
        self._set_level(self.clock.now(), watts)

    def schedule(self, pieces: list[tuple[float, float]], then: float | None = None) -> None:
        """Draw ``pieces`` from now on without advancing time, then ``then`` (default: idle)."""
        t = self.clock.now()
        for seconds, watts in pieces:
            self._set_level(t, watts)
            t += seconds
        self._set_level(t, self.idle_w if then is None else then)

    def run(self, pieces: list[tuple[float, float]]) -> float:
        """Draw ``pieces`` = [(seconds, watts), ...] from now, advancing the clock through them;
        return the exact energy they took (J)."""
        start = self.clock.now()
        self.schedule(pieces)
        end = start + sum(s for s, _ in pieces)
        self.clock.sleep(end - self.clock.now())
        return self.energy(end) - self.energy(start)

    def add_process(self, pid: int, watts: float = 0.0, start: float | None = None, end: float = math.inf,
                    memory: int = 2**30) -> None:
        """Another process on this GPU from ``start`` (default now) to ``end``, drawing ``watts``."""
        start = self.clock.now() if start is None else start
        with self.lock:
            self.foreign.append((start, end, watts, SimpleNamespace(pid=pid, usedGpuMemory=memory)))

    # ---- sensor readings -----------------------------------------------------------------
    def averaged_power(self, t: float, window_s: float) -> float:
        tk = last_refresh(t, self.power_update_s, self.t0 + self.power_phase_s, self.power_jitter_s, 1)
        return (self.energy(tk) - self.energy(tk - window_s)) / window_s

    def counter_mj(self, t: float) -> int:
        tk = last_refresh(t, self.counter_update_s, self.t0 + self.counter_phase_s, self.counter_jitter_s, 2)
        joules, start = self.energy(tk - self.counter_lag_s), self.counter_start_mj
        if self.counter_reset_at is not None and tk >= self.counter_reset_at:
            joules, start = joules - self.energy(self.counter_reset_at - self.counter_lag_s), 0
        steps = math.floor(joules / self.counter_resolution_j)
        value = start + round(steps * self.counter_resolution_j * 1000)
        return value % (1 << self.counter_bits) if self.counter_bits else value

    # ---- state -----------------------------------------------------------------------------
    def busy(self, t: float) -> bool:
        return self.level(t) > self.idle_w + 1.0

    def running_processes(self, t: float) -> list[SimpleNamespace]:
        return list(self.processes) + [p for start, end, _, p in self.foreign if start <= t < end]

    def temperature_c(self, t: float) -> float:
        """First-order thermal model: ambient + k × mean power over the last ``thermal_tau_s``."""
        mean_w = (self.energy(t) - self.energy(t - self.thermal_tau_s)) / self.thermal_tau_s
        return self.ambient_c + self.thermal_c_per_w * mean_w


class SimulatedNVML:
    """The subset of pynvml that :mod:`harness.energy` uses, over :class:`SimGPU` s."""

    NVMLError = pynvml.NVMLError

    def __init__(self, gpus: list[SimGPU], clock, driver: str = "550.54.15"):
        self.gpus, self.clock, self.driver = gpus, clock, driver
        self.failure: tuple[float, int] | None = None
        self.bursts: list[tuple[float, float, int]] = []
        self.rate, self.rate_code, self.rng = 0.0, pynvml.NVML_ERROR_UNKNOWN, random.Random(0)
        self.calls = self.errors = self.init_count = self.shutdown_count = 0

    def __getattr__(self, name: str):
        if name.startswith("NVML_") or name.startswith("nvmlClocks"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def fail_at(self, t: float, code: int = pynvml.NVML_ERROR_GPU_IS_LOST) -> None:
        """From virtual/real time ``t`` on, every device call raises ``NVMLError(code)``."""
        self.failure = (t, code)

    def glitch(self, start: float, end: float, code: int = pynvml.NVML_ERROR_TIMEOUT) -> None:
        """Every device call in [start, end) raises ``NVMLError(code)`` (a burst of timeouts)."""
        self.bursts.append((start, end, code))

    def error_rate(self, rate: float, code: int = pynvml.NVML_ERROR_UNKNOWN, seed: int = 0) -> None:
        """A fraction ``rate`` of device calls, at random, raises ``NVMLError(code)``."""
        self.rate, self.rate_code, self.rng = rate, code, random.Random(seed)

    def _gpu(self, handle) -> SimGPU:
        now = self.clock.now()
        self.calls += 1
        code = None
        if self.failure is not None and now >= self.failure[0]:
            code = self.failure[1]
        code = code or next((c for a, b, c in self.bursts if a <= now < b), None)
        if code is None and self.rate and self.rng.random() < self.rate:
            code = self.rate_code
        if code is not None:
            self.errors += 1
            raise pynvml.NVMLError(code)
        return self.gpus[handle]

    # exact figures for tests and the simulated source (not part of pynvml)
    def exact_energy(self, a: float, b: float) -> float:
        return sum(g.energy(b) - g.energy(a) for g in self.gpus)

    def exact_net_energy(self, a: float, b: float) -> float:
        return sum(g.net_energy(a, b) for g in self.gpus)

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

    nvmlDeviceGetEnforcedPowerLimit = nvmlDeviceGetPowerManagementLimit

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

    def nvmlDeviceGetClockInfo(self, handle, clock_type: int) -> int:
        gpu = self._gpu(handle)
        pair = gpu.sm_clocks_mhz if clock_type == pynvml.NVML_CLOCK_SM else gpu.mem_clocks_mhz
        return pair[1] if gpu.busy(self.clock.now()) else pair[0]

    def nvmlDeviceGetTemperature(self, handle, sensor: int) -> int:
        return round(self._gpu(handle).temperature_c(self.clock.now()))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle) -> int:
        gpu = self._gpu(handle)
        if gpu.busy(self.clock.now()):
            return gpu.throttle_reasons_active
        return pynvml.nvmlClocksThrottleReasonGpuIdle

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    def nvmlDeviceGetPersistenceMode(self, handle) -> int:
        return self._gpu(handle).persistence_mode

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._gpu(handle).running_processes(self.clock.now())

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        self._gpu(handle)
        return []
