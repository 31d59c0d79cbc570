"""The GPU's state around a cell, read through NVML: clocks, temperature, power limit, throttle
reasons, persistence mode, other processes; and an optional bounded cool-down before a cell.

A cell measured on a throttled GPU, on one shared with another process, or right after a hot
cell is not comparable to the others; the state at the start and end of every cell goes into
its summary (``gpu_state``) so the report can say so. Every field NVML cannot give is None with
the reason under ``errors``.
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


def _call(errors: dict, key: str, fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # NVMLError (not supported, lost GPU) or a missing binding
        errors[key] = str(e) or type(e).__name__
        return None


def device_state(nvml, handle) -> dict:
    """One GPU's state now."""
    errors: dict[str, str] = {}
    state: dict = {}
    state["sm_clock_mhz"] = _call(errors, "sm_clock_mhz", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
    state["mem_clock_mhz"] = _call(errors, "mem_clock_mhz", nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM)
    state["temperature_c"] = _call(errors, "temperature_c", nvml.nvmlDeviceGetTemperature, handle,
                                   nvml.NVML_TEMPERATURE_GPU)
    limit = _call(errors, "power_limit_w", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    state["power_limit_w"] = limit / 1000.0 if limit is not None else None
    get_reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons")
    mask = _call(errors, "throttle_reasons", get_reasons, handle)
    state["throttle_mask"] = mask
    state["throttle_reasons"] = reason_names(mask) if mask is not None else None
    state["throttled"] = bool(mask is not None and any(r in THROTTLING for r in reason_names(mask)))
    state["persistence_mode"] = _call(errors, "persistence_mode", nvml.nvmlDeviceGetPersistenceMode, handle)
    procs = []
    for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                     ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        found = _call(errors, f"{kind}_processes", getattr(nvml, fn), handle)
        for p in found or []:
            memory = getattr(p, "usedGpuMemory", None)
            procs.append({"pid": int(p.pid), "kind": kind, "used_memory_bytes": memory})
    me = os.getpid()
    state["processes"] = procs
    state["other_processes"] = sorted({p["pid"] for p in procs if p["pid"] != me})
    state["errors"] = errors
    return state


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
