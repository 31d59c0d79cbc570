"""Host contention around each measured prompt (issue 33.1): how busy the machine was while the prompt ran,
so that the report can say when two timings were taken under different conditions.

Per prompt, as ``host.*`` record fields:

* ``host.load_1m``: the 1-minute load average (``os.getloadavg``), the mean of its values at the start and
  the end of the prompt; ``host.cpus``: the logical CPUs (``os.cpu_count``), so that loads of two machines
  compare as ``load_1m / cpus``;
* ``host.cpu_busy`` and ``host.cpu_steal``: the share of all CPUs' time over the prompt's window that was
  busy (user, nice, system, irq, softirq, steal) and that the hypervisor stole (``/proc/stat``; Linux);
* ``host.cpu_mhz``: the mean current CPU frequency at the end of the prompt (``scaling_cur_freq`` in sysfs,
  else ``/proc/cpuinfo``);
* ``host.reason``: what could not be read (None when everything was).

The GPU's side of contention — other processes on the GPU and throttling — is the energy meter's
(:mod:`harness.energy.gpustate`: ``energy.shared``, ``energy.other_pids``, ``energy.throttled``); it is not
read twice. Readers are injectable (:func:`use`) so tests give a sweep any load they like, never the
machine's. Nothing here is timed inside the measured window: a sample is taken before and after it.
"""
from __future__ import annotations

import glob
import math
import os
from dataclasses import dataclass
from typing import Callable

NAN = math.nan
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # /proc/stat cpu line: user nice system idle iowait irq softirq steal ...
STEAL_FIELD = 7


def read_proc_stat(path: str = "/proc/stat") -> tuple[float, float, float]:
    """(busy, steal, total) jiffies of the aggregate ``cpu`` line of ``/proc/stat``."""
    with open(path, encoding="ascii") as f:
        first = f.readline().split()
    if not first or first[0] != "cpu":
        raise ValueError(f"{path}: no aggregate cpu line")
    values = [float(x) for x in first[1:]]
    values += [0.0] * (8 - len(values))
    total = sum(values[:8])  # guest time is already counted in user
    return sum(values[i] for i in BUSY_FIELDS), values[STEAL_FIELD], total


def read_cpu_mhz() -> float:
    """The mean current frequency over the CPUs, in MHz (sysfs ``scaling_cur_freq``, else ``/proc/cpuinfo``)."""
    khz = []
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            with open(path, encoding="ascii") as f:
                khz.append(float(f.read().strip()))
        except (OSError, ValueError):
            continue
    if khz:
        return sum(khz) / len(khz) / 1000.0
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        mhz = [float(line.split(":", 1)[1]) for line in f if line.lower().startswith("cpu mhz")]
    if not mhz:
        raise ValueError("/proc/cpuinfo lists no 'cpu MHz'")
    return sum(mhz) / len(mhz)


@dataclass
class Sample:
    """The host at one instant: load average, CPU time counters (busy, steal, total) and frequency."""

    load_1m: float = NAN
    cpu_times: tuple[float, float, float] | None = None
    cpu_mhz: float = NAN
    errors: tuple[str, ...] = ()


class ContentionReader:
    """Samples the host; :meth:`between` turns two samples into a prompt's ``host.*`` fields. Each source is an
    injectable callable; one that fails gives NaN and its reason, never an error."""

    def __init__(self, loadavg: Callable[[], tuple] = os.getloadavg,
                 cpu_times: Callable[[], tuple[float, float, float]] = read_proc_stat,
                 cpu_mhz: Callable[[], float] = read_cpu_mhz, cpus: Callable[[], int | None] = os.cpu_count):
        self.loadavg, self.cpu_times, self.cpu_mhz, self.cpus = loadavg, cpu_times, cpu_mhz, cpus

    def sample(self) -> Sample:
        s, errors = Sample(), []
        for name, read, store in (("load average", lambda: float(self.loadavg()[0]), "load_1m"),
                                  ("/proc/stat", lambda: tuple(self.cpu_times()), "cpu_times"),
                                  ("CPU frequency", lambda: float(self.cpu_mhz()), "cpu_mhz")):
            try:
                setattr(s, store, read())
            except Exception as e:  # noqa: BLE001 — OSError, no such file on macOS, a malformed line
                errors.append(f"{name}: {type(e).__name__}: {e}")
        s.errors = tuple(errors)
        return s

    def between(self, a: Sample, b: Sample) -> dict:
        """The ``host.*`` fields of the window from sample ``a`` to sample ``b``."""
        loads = [x for x in (a.load_1m, b.load_1m) if math.isfinite(x)]
        busy = steal = NAN
        if a.cpu_times is not None and b.cpu_times is not None:
            d_busy, d_steal, d_total = (y - x for x, y in zip(a.cpu_times, b.cpu_times))
            if d_total > 0:
                busy, steal = d_busy / d_total, d_steal / d_total
        try:
            cpus = self.cpus()
        except Exception:  # noqa: BLE001 — an injected reader: whatever it raises, the CPU count is unknown
            cpus = None
        errors = sorted(set(a.errors + b.errors))
        return {"load_1m": sum(loads) / len(loads) if loads else NAN, "cpus": int(cpus) if cpus else None,
                "cpu_busy": busy, "cpu_steal": steal, "cpu_mhz": b.cpu_mhz, "reason": "; ".join(errors) or None}


_reader: ContentionReader | None = None


def use(reader: ContentionReader | None) -> None:
    """Make ``reader`` the one every measured prompt samples (None: the machine's own, the default)."""
    global _reader
    _reader = reader


def reader() -> ContentionReader:
    """The reader in use: :func:`use`'s, else one reading this machine."""
    return _reader if _reader is not None else ContentionReader()
