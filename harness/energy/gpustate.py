"""The GPU's state around a cell, read through NVML: clocks, temperature, power limit, throttle
reasons, persistence mode, other processes; and an optional bounded cool-down before a cell.

A cell measured on a throttled GPU, on one shared with another process, or right after a hot
cell is not comparable to the others; the state at the start and end of every cell goes into
its summary (``gpu_state``) so the report can say so, and :class:`StateWatch` samples throttle
reasons and processes *during* the cell so each prompt they touch is flagged (``energy.throttled``,
``energy.shared``). Every field NVML cannot give is None with the reason under ``errors``.
"""
from __future__ import annotations

import math
import os
import statistics

NAN = math.nan

# clock-event ("throttle") reason bits (nvmlClocksEventReason*/nvmlClocksThrottleReason*) by name;
# the ones that mean the GPU ran slower than asked for power or heat are "throttling"
REASON_BITS = {"gpu_idle": 0x1, "applications_clocks_setting": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
               "sync_boost": 0x10, "sw_thermal_slowdown": 0x20, "hw_thermal_slowdown": 0x40,
               "hw_power_brake_slowdown": 0x80, "display_clock_setting": 0x100}
THROTTLING = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def reason_names(mask: int) -> list[str]:
    return [name for name, bit in REASON_BITS.items() if mask & bit]


def _call(errors: dict, key: str, nvml, names: str | tuple[str, ...], *args):
    """``nvml.<name>(*args)`` for the first of ``names`` this binding has; None with the reason under
    ``errors[key]`` where it has none of them or the call fails (a driver lacking one never crashes)."""
    try:
        for name in (names,) if isinstance(names, str) else names:
            fn = getattr(nvml, name, None)
            if fn is not None:
                return fn(*args)
        raise AttributeError(f"this NVML binding has no {' or '.join((names,) if isinstance(names, str) else names)}")
    except Exception as e:  # NVMLError (not supported, lost GPU), a missing binding or constant
        errors[key] = str(e) or type(e).__name__
        return None


def _constant(nvml, name: str, default: int) -> int:
    return getattr(nvml, name, default)


THROTTLE_CALLS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


def device_state(nvml, handle) -> dict:
    """One GPU's state now."""
    errors: dict[str, str] = {}
    state: dict = {}
    sm, mem, gpu_sensor = (_constant(nvml, "NVML_CLOCK_SM", 1), _constant(nvml, "NVML_CLOCK_MEM", 2),
                           _constant(nvml, "NVML_TEMPERATURE_GPU", 0))
    state["sm_clock_mhz"] = _call(errors, "sm_clock_mhz", nvml, "nvmlDeviceGetClockInfo", handle, sm)
    state["mem_clock_mhz"] = _call(errors, "mem_clock_mhz", nvml, "nvmlDeviceGetClockInfo", handle, mem)
    state["temperature_c"] = _call(errors, "temperature_c", nvml, "nvmlDeviceGetTemperature", handle, gpu_sensor)
    limit = _call(errors, "power_limit_w", nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    state["power_limit_w"] = limit / 1000.0 if limit is not None else None
    mask = _call(errors, "throttle_reasons", nvml, THROTTLE_CALLS, handle)
    state["throttle_mask"] = mask
    state["throttle_reasons"] = reason_names(mask) if mask is not None else None
    state["throttled"] = bool(mask is not None and any(r in THROTTLING for r in reason_names(mask)))
    state["persistence_mode"] = _call(errors, "persistence_mode", nvml, "nvmlDeviceGetPersistenceMode", handle)
    procs = processes(nvml, handle, errors)
    state["processes"] = procs
    state["other_processes"] = sorted({p["pid"] for p in procs if p["pid"] != os.getpid()})
    state["errors"] = errors
    return state


def processes(nvml, handle, errors: dict) -> list[dict]:
    """Compute and graphics processes on one GPU (pid, kind, memory)."""
    procs = []
    for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                     ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        for p in _call(errors, f"{kind}_processes", nvml, fn, handle) or []:
            procs.append({"pid": int(p.pid), "kind": kind, "used_memory_bytes": getattr(p, "usedGpuMemory", None)})
    return procs


class StateWatch:
    """Throttle reasons and other processes sampled during the cell, from the sampler thread, so
    that state seen only under load or only mid-cell flags the prompts it touches. Throttle reasons
    are read every ``every_s`` (cheap), the process list every ``processes_every``-th time; runs of
    equal state are kept as intervals [first seen, last seen]."""

    def __init__(self, nvml, handles: list, clock, every_s: float = 0.1, processes_every: int = 5,
                 keep_s: float = 3600.0):
        self.nvml, self.handles, self.clock = nvml, list(handles), clock
        self.every_s, self.processes_every, self.keep_s = every_s, processes_every, keep_s
        self.due, self.ticks, self.failed = -math.inf, 0, 0
        self.pids: tuple[int, ...] = ()
        self.intervals: list[list] = []  # [start, end, reasons (tuple), other pids (tuple)]

    def tick(self, now_with_processes: bool = False) -> None:
        """Sample when due (from the sampler thread); ``now_with_processes``: now, the process list included."""
        now = self.clock.now()
        if now < self.due and not now_with_processes:
            return
        self.due = now + self.every_s
        errors: dict[str, str] = {}
        reasons: set[str] = set()
        for handle in self.handles:
            mask = _call(errors, "throttle_reasons", self.nvml, THROTTLE_CALLS, handle)
            reasons.update(r for r in reason_names(mask or 0) if r in THROTTLING)
        if now_with_processes or self.ticks % self.processes_every == 0:
            pids = {p["pid"] for h in self.handles for p in processes(self.nvml, h, errors)} - {os.getpid()}
            self.pids = tuple(sorted(pids)) if "compute_processes" not in errors else self.pids
        self.ticks += 1
        self.failed += bool(errors)
        state = (tuple(sorted(reasons)), self.pids)
        if self.intervals and (self.intervals[-1][2], self.intervals[-1][3]) == state:
            self.intervals[-1][1] = now
        else:
            self.intervals.append([now, now, *state])
        while self.intervals and self.intervals[0][1] < now - self.keep_s:
            self.intervals.pop(0)

    def between(self, a: float, b: float) -> dict:
        """What was seen while [a, b] ran: throttling (and why), other processes, samples taken."""
        seen = [iv for iv in self.intervals if iv[1] >= a and iv[0] <= b]
        reasons = sorted({r for iv in seen for r in iv[2]})
        pids = sorted({p for iv in seen for p in iv[3]})
        return {"throttled": bool(reasons), "throttle_reasons": ",".join(reasons) or None, "shared": bool(pids),
                "other_pids": ",".join(map(str, pids)) or None, "state_samples": len(seen)}


def gpu_state(nvml, devices) -> list[dict]:
    """State of every device in use (``devices``: :class:`~harness.energy.sources.GpuDevice`)."""
    return [{"index": d.cuda_index, "name": d.name, "uuid": d.uuid, **device_state(nvml, d.handle)} for d in devices]


def summarize_state(start: list[dict] | None, end: list[dict] | None, reason: str | None = None) -> dict:
    """The ``gpu_state`` summary of a cell: per-GPU states at start and end, and the flags a report
    warns about (``throttled``, ``shared``) with what caused them."""
    if start is None:
        return {"available": False, "reason": reason or "no GPU state (no NVML device in use)"}
    states = (start or []) + (end or [])
    reasons = sorted({r for s in states for r in (s.get("throttle_reasons") or []) if r in THROTTLING})
    others = sorted({p for s in states for p in s.get("other_processes", [])})
    temps = [s["temperature_c"] for s in states if s.get("temperature_c") is not None]
    return {"available": True, "start": start, "end": end, "throttled": bool(reasons), "throttle_reasons": reasons,
            "shared": bool(others), "other_pids": others, "max_temperature_c": max(temps) if temps else None,
            "persistence_mode_off": any(s.get("persistence_mode") == 0 for s in states)}


def cool_down(read_temperature, read_power, clock, max_s: float, window_s: float = 5.0, temp_tol_c: float = 1.0,
              power_tol: float = 0.02, step_s: float = 0.5) -> dict:
    """Wait (at most ``max_s``) until temperature and idle power have settled: their means over the
    last ``window_s`` and the ``window_s`` before differ by at most ``temp_tol_c`` and ``power_tol``
    (relative) — means, so that sensor noise and ripple do not keep it waiting. ``read_temperature``
    and ``read_power`` return totals over the GPUs in use."""
    start = clock.now()
    history: list[tuple[float, float, float]] = []
    while True:
        now = clock.now()
        try:
            history.append((now, float(read_temperature()), float(read_power())))
        except Exception as e:  # noqa: BLE001 — a cool-down never fails a cell
            return {"cooldown_s": now - start, "cooldown_settled": False, "cooldown_reason": f"read failed: {e}"}
        if now - start >= 2 * window_s:
            recent = [h for h in history if h[0] > now - window_s]
            before = [h for h in history if now - 2 * window_s < h[0] <= now - window_s]
            if recent and before:
                t1, t0 = (statistics.mean(h[1] for h in hs) for hs in (recent, before))
                p1, p0 = (statistics.mean(h[2] for h in hs) for hs in (recent, before))
                if abs(t1 - t0) <= temp_tol_c and abs(p1 - p0) <= power_tol * max(p1, 1e-9):
                    return {"cooldown_s": now - start, "cooldown_settled": True, "cooldown_temperature_c": t1,
                            "cooldown_power_w": p1}
        if now - start >= max_s:
            return {"cooldown_s": now - start, "cooldown_settled": False, "cooldown_temperature_c": history[-1][1],
                    "cooldown_power_w": history[-1][2],
                    "cooldown_reason": f"not settled within energy.cooldown_s={max_s:g} s"}
        clock.sleep(step_s)
