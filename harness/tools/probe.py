"""``harness-power-probe``: what this machine can tell about GPU power and energy.

Prints the GPUs, their architecture and driver, which sources and fields exist (NVML energy
counter, instant / average power fields, nvmlDeviceGetPowerUsage, nvidia-smi), their update
periods inferred by fast polling, the documented averaging window, and idle power. On a
machine without an NVIDIA GPU it says so plainly and exits 0.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from typing import Any

from harness.energy.sensors import characterize
from harness.energy.sampler import RealClock, Sampler
from harness.energy.series import HOLD
from harness.energy.sources import (Channel, NvmlCounter, NvmlPower, describe_device, init_nvml,
                                    unsupported_reason)


def _fmt(value, unit: str = "", digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:.{digits}f}{unit}"


def mean_power(series, a: float, b: float) -> float:
    """Mean power over [a, b] from one device's readings: a counter's slope between its first and
    last refreshes inside, or the held power readings."""
    if series.kind == "energy":
        inside = [(t, v) for t, v in zip(series.times, series.values) if a <= t <= b]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return math.nan
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])
    return series.energy(a, b, HOLD) / (b - a) if b > a and series.times else math.nan


def probe_device(nvml, index: int, poll_seconds: float, idle_seconds: float, clock) -> dict:
    device = describe_device(nvml, index, nvml.nvmlDeviceGetHandleByIndex(index))
    channels = [NvmlCounter(nvml, [device])] + [NvmlPower(nvml, [device], r) for r in ("instant", "average", "usage")]
    available: list[Channel] = []
    missing: dict[str, str] = {}
    for channel in channels:
        why = unsupported_reason(nvml, lambda h, c=channel: c.read_one(h), [device.handle])
        if why is None:
            available.append(channel)
        else:
            missing[channel.name] = why
    sensors = characterize(available, clock, poll_seconds) if poll_seconds > 0 else {}
    periods = {name: sensor.inferred_update_s for name, sensor in sensors.items()}
    idle = {}
    if idle_seconds > 0 and available:
        sampler = Sampler(available, clock, 0.01, skip_unchanged=True, align_timestamps=False)
        start = clock.now()
        while clock.now() - start < idle_seconds:
            sampler.poll()
            clock.sleep(sampler.interval_s)
        end = clock.now()
        for c in available:
            idle[c.name] = mean_power(sampler.snapshot(c.name)[0], start, end)
    try:
        limit_w = nvml.nvmlDeviceGetPowerManagementLimit(device.handle) / 1000.0
    except nvml.NVMLError:
        limit_w = math.nan
    return {
        "index": index, "name": device.name, "architecture": device.architecture, "uuid": device.uuid,
        "power_limit_w": limit_w,
        "sources": {c.name: {
            "available": c in available,
            "why_not": missing.get(c.name),
            "inferred_update_s": periods.get(c.name, math.nan),
            "jitter_s": sensors[c.name].jitter() if c.name in sensors else math.nan,
            "resolution_j": sensors[c.name].resolution_j if c.name in sensors else math.nan,
            "documented_update_s": c.semantics.update_s if c.semantics else None,
            "documented_window_s": c.semantics.window_s if c.semantics else None,
            "semantics": c.semantics.note if c.semantics else "cumulative energy (mJ since driver load)",
            "idle_w": idle.get(c.name, math.nan),
        } for c in channels},
    }


def probe(poll_seconds: float = 1.0, idle_seconds: float = 2.0, nvml=None, clock=None) -> dict:
    """Everything the probe reports, as a dict (``gpus`` is empty where there is no GPU)."""
    smi = shutil.which("nvidia-smi")
    module, reason = init_nvml(nvml)
    report: dict[str, Any] = {"nvml": reason or "ok", "nvidia_smi": smi or "not on PATH", "gpus": []}
    if module is None:
        return report
    try:
        report["driver"] = str(module.nvmlSystemGetDriverVersion())
        count = module.nvmlDeviceGetCount()
        report["gpus"] = [probe_device(module, i, poll_seconds, idle_seconds, clock or RealClock())
                          for i in range(count)]
    finally:
        module.nvmlShutdown()
    return report


def render(report: dict) -> str:
    if not report["gpus"]:
        return ("No NVIDIA GPU found on this machine.\n"
                f"  NVML: {report['nvml']}\n  nvidia-smi: {report['nvidia_smi']}\n"
                "Energy cannot be measured here: runs record energy.* as NaN with this reason.")
    lines = [f"NVIDIA driver {report.get('driver', '?')}; nvidia-smi: {report['nvidia_smi']}"]
    for gpu in report["gpus"]:
        lines.append(f"GPU {gpu['index']}: {gpu['name']} ({gpu['architecture']}), {gpu['uuid']}, "
                     f"power limit {_fmt(gpu['power_limit_w'], ' W', 0)}")
        for name, s in gpu["sources"].items():
            if not s["available"]:
                lines.append(f"  {name:20s} not available: {s['why_not']}")
                continue
            lines.append(f"  {name:20s} update every {_fmt(s['inferred_update_s'], ' s')} (inferred; documented "
                         f"{_fmt(s['documented_update_s'], ' s')}), averaging window "
                         f"{_fmt(s['documented_window_s'], ' s')}, idle {_fmt(s['idle_w'], ' W', 1)}")
            lines.append(f"  {'':20s} {s['semantics']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness-power-probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--poll-seconds", type=float, default=1.0,
                        help="fast-poll each source this long to infer its update period (default 1)")
    parser.add_argument("--idle-seconds", type=float, default=2.0, help="measure idle power this long (default 2)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = probe(args.poll_seconds, args.idle_seconds)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
