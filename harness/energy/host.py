"""Host (CPU package and DRAM) energy from RAPL through Linux powercap sysfs.

Zones live under ``<root>/intel-rapl:<n>[:<m>]`` (the ``intel_rapl`` powercap driver serves
Intel and, since Linux 5.8-5.11, AMD Zen too; AMD exposes package and core, no DRAM). Each zone
has ``name`` (``package-0``, ``package-0-die-1``, ``dram``, ``core``, ``uncore``, ``psys``),
``energy_uj`` (µJ, wrapping at ``max_energy_range_uj``). Package zones sum to ``cpu``, DRAM
zones to ``dram``; core and uncore are parts of the package and are not added again; psys
(whole platform, where present) is kept as ``platform``. ``intel-rapl-mmio`` zones duplicate the
package for power limiting and are skipped.

Counters are unwrapped on every read (a decrease means one wrap: add the range), so cumulative
joules stay monotone as long as reads come more often than the counter wraps (≥ 20 minutes at
a package's full power; every measured window and the GPU sampler read it). Since Linux 5.10
(CVE-2020-8694) ``energy_uj`` is readable by root only: such zones are reported, with the fix,
instead of read. Where the machine has no powercap tree (as in most VMs), every host field is
NaN with the reason.
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path

NAN = math.nan
DEFAULT_ROOT = "/sys/class/powercap"
GROUPS = ("cpu", "dram", "platform")


@dataclass
class Zone:
    path: Path
    name: str
    group: str
    max_range_uj: int
    last_raw: int | None = None
    wraps: int = 0

    def read_uj(self) -> int:
        raw = int((self.path / "energy_uj").read_text().strip())
        if self.last_raw is not None and raw < self.last_raw:
            self.wraps += 1
        self.last_raw = raw
        return raw + self.wraps * self.max_range_uj


def _group(name: str) -> str | None:
    if name.startswith("package"):
        return "cpu"
    if name == "dram":
        return "dram"
    if name == "psys":
        return "platform"
    return None  # core, uncore: parts of a package


class HostEnergy:
    """Cumulative host energy by group (``cpu``, ``dram``, ``platform``) from RAPL zones."""

    def __init__(self, root: str | os.PathLike = DEFAULT_ROOT):
        self.root = Path(root)
        self.zones: list[Zone] = []
        self.missing: dict[str, str] = {}  # group or zone → why it is not measured
        self.lock = threading.Lock()
        self._discover()

    def _discover(self) -> None:
        if not self.root.is_dir():
            self.reason = f"no powercap tree at {self.root} (no RAPL exposed: a VM, or not Linux)"
            return
        denied = []
        for entry in sorted(self.root.iterdir()):
            if not entry.name.startswith("intel-rapl:"):
                continue
            try:
                name = (entry / "name").read_text().strip()
            except OSError:
                continue
            group = _group(name)
            if group is None:
                continue
            try:
                max_range = int((entry / "max_energy_range_uj").read_text().strip())
                zone = Zone(entry, name, group, max_range)
                zone.read_uj()
            except PermissionError:
                denied.append(entry.name)
                continue
            except (OSError, ValueError) as e:
                self.missing[entry.name] = f"{entry / 'energy_uj'} unreadable: {e}"
                continue
            self.zones.append(zone)
        if denied:
            self.missing["permission"] = (f"{', '.join(denied)}: energy_uj is readable by root only (Linux ≥ 5.10, "
                                          "CVE-2020-8694); grant read access (e.g. a udev rule or chmod o+r) to "
                                          "measure host energy")
        for group in GROUPS:
            if not any(z.group == group for z in self.zones):
                self.missing.setdefault(group, "no readable RAPL zone of this kind" + (
                    " (AMD CPUs expose none for DRAM)" if group == "dram" else ""))
        self.reason = None if self.zones else (
            "no readable RAPL zone under " + str(self.root) + ": " + "; ".join(f"{k}: {v}" for k, v in self.missing.items()))

    @property
    def available(self) -> bool:
        return bool(self.zones)

    def groups(self) -> list[str]:
        return [g for g in GROUPS if any(z.group == g for z in self.zones)]

    def read(self) -> dict[str, float]:
        """Cumulative joules per group (NaN for a group not measured or whose read failed)."""
        out = {g: NAN for g in GROUPS}
        with self.lock:
            for zone in self.zones:
                try:
                    uj = zone.read_uj()
                except (OSError, ValueError) as e:
                    self.missing[zone.path.name] = f"read failed: {e}"
                    out[zone.group] = NAN
                    continue
                current = out[zone.group]
                out[zone.group] = uj / 1e6 + (0.0 if math.isnan(current) else current)
        return out

    def describe(self) -> dict:
        return {"host_energy_root": str(self.root), "host_energy_zones": [f"{z.path.name}={z.name}" for z in self.zones],
                "host_energy_reason": self.reason, "host_energy_missing": dict(self.missing)}


def host_delta(start: dict | None, end: dict | None) -> dict[str, float]:
    """Energy per group between two :meth:`HostEnergy.read` results (NaN where either is missing)."""
    if start is None or end is None:
        return {g: NAN for g in GROUPS}
    return {g: end.get(g, NAN) - start.get(g, NAN) for g in GROUPS}
