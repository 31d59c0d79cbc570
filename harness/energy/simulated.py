"""A simulated NVML over a known power waveform, for tests, studies and CPU-only runs.

:class:`SimGPU` holds the true power: piecewise-constant levels (idle, or the pieces of a
workload) plus a small sinusoidal ripple and an optional idle drift (a linear ramp and a slow
sine: "idle drifting between 60 and 90 W"), so its exact integral is known at any time. Its
readings follow GUIDE §2 (Yang, Adamek & Armour 2023): the power fields report the average of
the last ``power_window_s`` (25 ms on A100/H100; 1 s for ``nvmlDeviceGetPowerUsage`` on
Ampere+ when ``usage_window_s=1``), refreshed every ``power_update_s`` (which may be inexact,
e.g. 100.3 ms); the energy counter (mJ) is refreshed at its own period and resolution. It also
reports the state NVML gives per cell: clocks (high while a workload runs), a temperature
following the power of the last ``thermal_tau_s``, power limit, throttle reasons, persistence
mode and the processes on the GPU.

:class:`SimulatedNVML` exposes all that under pynvml's names (raising pynvml's own
``NVMLError``), so :mod:`harness.energy.sources` runs unchanged on it. :class:`SimClock` is
virtual time: ``sleep`` advances it and fires the sampler's polls, so a minute of measurement
takes milliseconds. With a real clock (``energy.source=simulated``, :func:`simulated_sources`)
the simulated GPU draws its active power while the meter's workload runs, so the whole runner
path can be exercised on a CPU and checked against the exact integral.

This module imports nothing from the harness, so a study can load it next to an older meter.
"""
from __future__ import annotations

import bisect
import contextlib
import math
import random
import threading
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


class SimGPU:
    """One simulated GPU: a known power waveform and sensor readings derived from it."""

    def __init__(self, clock, *, name: str = "NVIDIA H100 80GB HBM3", architecture: int = pynvml.NVML_DEVICE_ARCH_HOPPER,
                 idle_w: float = 70.0, ripple_w: float = 1.0, ripple_period_s: float = 0.173,
                 power_update_s: float = 0.1, power_window_s: float = 0.025, power_phase_s: float = 0.0371,
                 usage_window_s: float | None = None, counter_update_s: float = 0.1, counter_phase_s: float = 0.0123,
                 counter_resolution_j: float = 0.001, has_counter: bool = True, has_instant: bool = True,
                 uuid: str = "GPU-00000000-sim0", power_limit_w: float = 700.0,
                 idle_ramp_w_per_s: float = 0.0, idle_wave_w: float = 0.0, idle_wave_period_s: float = 600.0,
                 idle_wave_phase: float = 0.0, ambient_c: float = 30.0, thermal_c_per_w: float = 0.12,
                 thermal_tau_s: float = 20.0, sm_clocks_mhz: tuple[int, int] = (345, 1980),
                 mem_clocks_mhz: tuple[int, int] = (1593, 2619), persistence_mode: int = 1):
        self.clock, self.name, self.architecture, self.uuid = clock, name, architecture, uuid
        self.power_limit_w = power_limit_w
        self.idle_w, self.ripple_w, self.ripple_period_s = idle_w, ripple_w, ripple_period_s
        self.power_update_s, self.power_window_s, self.power_phase_s = power_update_s, power_window_s, power_phase_s
        self.usage_window_s = usage_window_s if usage_window_s is not None else power_window_s
        self.counter_update_s, self.counter_phase_s = counter_update_s, counter_phase_s
        self.counter_resolution_j = counter_resolution_j
        self.has_counter, self.has_instant = has_counter, has_instant
        self.idle_ramp_w_per_s, self.idle_wave_w = idle_ramp_w_per_s, idle_wave_w
        self.idle_wave_period_s, self.idle_wave_phase = idle_wave_period_s, idle_wave_phase
        self.ambient_c, self.thermal_c_per_w, self.thermal_tau_s = ambient_c, thermal_c_per_w, thermal_tau_s
        self.sm_clocks_mhz, self.mem_clocks_mhz = sm_clocks_mhz, mem_clocks_mhz
        self.persistence_mode = persistence_mode
        self.throttle_reasons_active = 0  # e.g. pynvml.nvmlClocksThrottleReasonSwPowerCap: reported while busy
        self.processes: list[SimpleNamespace] = []  # other processes on this GPU (pid, usedGpuMemory)
        self.t0 = clock.now()
        self.breaks, self.levels, self.cumulative = [self.t0], [idle_w], [0.0]
        self.lock = threading.Lock()  # a real-time sampler thread reads while the workload sets levels

    # ---- the true waveform ----------------------------------------------------------------
    def _base_energy(self, t: float) -> float:
        if t < self.t0:  # before creation: idle at the nominal level
            return self.idle_w * (t - self.t0)
        i = max(bisect.bisect_right(self.breaks, t) - 1, 0)
        return self.cumulative[i] + self.levels[i] * (t - self.breaks[i])

    def _drift_energy(self, t: float) -> float:
        """∫ from t0 to t of the idle drift (ramp + sine) and the ripple, exactly."""
        x = t - self.t0
        e = self.idle_ramp_w_per_s * x * x / 2
        if self.idle_wave_w:
            w = 2 * math.pi / self.idle_wave_period_s
            e += self.idle_wave_w / w * (math.cos(self.idle_wave_phase) - math.cos(w * x + self.idle_wave_phase))
        phase = 2 * math.pi * x / self.ripple_period_s
        return e + self.ripple_w * self.ripple_period_s / (2 * math.pi) * (1 - math.cos(phase))

    def energy(self, t: float) -> float:
        """Exact energy (J) from creation to ``t``."""
        with self.lock:
            return self._base_energy(t) + self._drift_energy(t)

    def idle_power(self, t: float) -> float:
        """What the GPU draws at ``t`` when idle (nominal idle + drift + ripple)."""
        x = t - self.t0
        wave = self.idle_wave_w * math.sin(2 * math.pi * x / self.idle_wave_period_s + self.idle_wave_phase)
        ripple = self.ripple_w * math.sin(2 * math.pi * x / self.ripple_period_s)
        return self.idle_w + self.idle_ramp_w_per_s * x + wave + ripple

    def net_energy(self, a: float, b: float) -> float:
        """Exact energy above idle over [a, b] (what net energy should report)."""
        with self.lock:
            return self._base_energy(b) - self._base_energy(a) - self.idle_w * (b - a)

    def level(self, t: float) -> float:
        with self.lock:
            return self.levels[max(bisect.bisect_right(self.breaks, t) - 1, 0)]

    def _set_level(self, t: float, watts: float) -> None:
        with self.lock:
            i = bisect.bisect_right(self.breaks, t)
            if i < len(self.breaks):  # drop levels scheduled after t (a workload ended early)
                del self.breaks[i:], self.levels[i:], self.cumulative[i:]
            if t == self.breaks[-1]:
                self.levels[-1] = watts
                return
            self.cumulative.append(self._base_energy(t))
            self.breaks.append(t)
            self.levels.append(watts)

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

    # ---- sensor readings -----------------------------------------------------------------
    @staticmethod
    def _last_update(t: float, period: float, phase: float) -> float:
        return phase + math.floor((t - phase) / period) * period

    def averaged_power(self, t: float, window_s: float) -> float:
        tk = self._last_update(t, self.power_update_s, self.t0 + self.power_phase_s)
        return (self.energy(tk) - self.energy(tk - window_s)) / window_s

    def counter_mj(self, t: float) -> int:
        tk = self._last_update(t, self.counter_update_s, self.t0 + self.counter_phase_s)
        steps = math.floor(self.energy(tk) / self.counter_resolution_j)
        return 10**9 + round(steps * self.counter_resolution_j * 1000)

    # ---- state -----------------------------------------------------------------------------
    def busy(self, t: float) -> bool:
        return self.level(t) > self.idle_w + 1.0

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
        self.init_count = self.shutdown_count = 0

    def __getattr__(self, name: str):
        if name.startswith("NVML_") or name.startswith("nvmlClocks"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def fail_at(self, t: float, code: int = pynvml.NVML_ERROR_GPU_IS_LOST) -> None:
        """From virtual/real time ``t`` on, every device call raises ``NVMLError(code)``."""
        self.failure = (t, code)

    def _gpu(self, handle) -> SimGPU:
        if self.failure is not None and self.clock.now() >= self.failure[0]:
            raise pynvml.NVMLError(self.failure[1])
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

    def nvmlDeviceGetEnforcedPowerLimit(self, handle) -> int:
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
        return list(self._gpu(handle).processes)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        self._gpu(handle)
        return []


# ---- loads ------------------------------------------------------------------------------------

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


def square_wave(period_s: float, duty: float, high_w: float, low_w: float, seconds: float) -> list[tuple[float, float]]:
    """A periodic load: ``duty`` of every ``period_s`` at ``high_w``, the rest at ``low_w``."""
    pieces, t = [], 0.0
    while t < seconds - 1e-12:
        high = min(duty * period_s, seconds - t)
        low = min(period_s - duty * period_s, seconds - t - high)
        pieces.append((high, high_w))
        if low > 0:
            pieces.append((low, low_w))
        t += high + max(low, 0.0)
    return pieces


def prefill_then_decode(rng: random.Random, seconds: float, prefill_s: float = 0.12, prefill_w: float = 520.0,
                        step_s: float = 0.02, decode_w: tuple[float, float] = (230.0, 330.0)) -> list[tuple[float, float]]:
    """A generation opening on a prefill plateau (long prompt, high power), then regular decode
    steps: the case where a counter window filling its edges with the window's mean is biased."""
    pieces = [(prefill_s, prefill_w)]
    t = prefill_s
    while t < seconds:
        busy = step_s * rng.uniform(0.7, 0.9)
        pieces += [(busy, rng.uniform(*decode_w)), (step_s - busy, 110.0)]
        t += step_s
    return pieces


def thermal_ramp(pieces: list[tuple[float, float]], rise: float) -> list[tuple[float, float]]:
    """Scale the pieces' power from ×1 at the start to ×(1 + ``rise``) at the end (a GPU heating up)."""
    total = sum(s for s, _ in pieces)
    out, t = [], 0.0
    for s, w in pieces:
        out.append((s, w * (1 + rise * (t + s / 2) / total)))
        t += s
    return out


# ---- a simulated GPU selected from configuration (energy.source=simulated) -----------------------

ARCHITECTURE_CODES = {"pascal": pynvml.NVML_DEVICE_ARCH_PASCAL, "volta": pynvml.NVML_DEVICE_ARCH_VOLTA,
                      "turing": pynvml.NVML_DEVICE_ARCH_TURING, "ampere": pynvml.NVML_DEVICE_ARCH_AMPERE,
                      "ada": pynvml.NVML_DEVICE_ARCH_ADA, "hopper": pynvml.NVML_DEVICE_ARCH_HOPPER}
SIM_GPU_KEYS = ("name", "idle_w", "ripple_w", "power_update_s", "power_window_s", "usage_window_s", "counter_update_s",
                "counter_resolution_j", "has_counter", "has_instant", "power_limit_w", "idle_ramp_w_per_s",
                "idle_wave_w", "idle_wave_period_s")
WORKLOAD_KEYS = ("active_w", "prefill_w", "prefill_s")


class SimulatedWorkloadGPUs:
    """Simulated GPUs whose power follows the meter's workload: ``activity()`` wraps each run of
    the workload (the decoder's generation), during which every GPU draws ``prefill_w`` for the
    first ``prefill_s`` then ``active_w``; idle otherwise. Built from a ``conf/gpu`` profile's
    ``simulated`` section."""

    def __init__(self, spec: dict, clock):
        spec = dict(spec)
        unknown = sorted(set(spec) - set(SIM_GPU_KEYS) - set(WORKLOAD_KEYS) - {"gpus", "architecture"})
        if unknown:
            raise ValueError(f"unknown gpu.simulated option(s) {unknown}; valid: "
                             f"{', '.join(sorted(SIM_GPU_KEYS + WORKLOAD_KEYS + ('gpus', 'architecture')))}")
        self.active_w = float(spec.get("active_w", 300.0))
        self.prefill_w = float(spec.get("prefill_w", self.active_w))
        self.prefill_s = float(spec.get("prefill_s", 0.0))
        arch = spec.get("architecture", "hopper")
        kwargs = {k: spec[k] for k in SIM_GPU_KEYS if spec.get(k) is not None}
        kwargs.setdefault("name", "Simulated GPU")
        kwargs["architecture"] = ARCHITECTURE_CODES.get(arch, pynvml.NVML_DEVICE_ARCH_HOPPER)
        rng = random.Random(0)
        self.gpus = [SimGPU(clock, uuid=f"GPU-simulated-{i}", power_phase_s=rng.uniform(0, 0.1),
                            counter_phase_s=rng.uniform(0, 0.1), **kwargs) for i in range(int(spec.get("gpus", 1)))]
        self.nvml = SimulatedNVML(self.gpus, clock)

    @contextlib.contextmanager
    def activity(self):
        pieces = [(self.prefill_s, self.prefill_w)] if self.prefill_s > 0 else []
        for gpu in self.gpus:
            gpu.schedule(pieces, then=self.active_w)
        try:
            yield
        finally:
            for gpu in self.gpus:
                gpu.hold(gpu.idle_w)
