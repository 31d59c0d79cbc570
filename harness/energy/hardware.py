"""What a GPU's power reading means, and the ``gpu`` profile schema: the one place GPU facts live.

A reading that averages ``window_s`` out of every ``update_s`` sees only that fraction of the
run ("part-time" power: 25 ms of every 100 ms on A100/H100; Yang, Adamek & Armour 2023, GUIDE
§2). These figures feed the coverage estimate, the timestamp alignment and the phase-shifting
delays. The update period is also inferred on the machine by fast polling; the averaging window
cannot be, so it comes from :data:`ARCHITECTURE_FACTS`, from a ``gpu`` profile's override, or
from ``harness-gpu-check`` (which measures it). ``None`` means not known: nothing is made up.

:class:`GpuProfile` is the ``gpu`` config group's schema (a Hydra structured config, stored as
``gpu_schema``; every preset conforms: tests/energy/test_energy_config.py); ``conf/gpu/*.yaml``
are presets naming GPUs (``match``, ``architecture``) and, for simulated GPUs, the simulator's
settings. A preset repeats no figure of this module: ``power_update_s`` / ``power_window_s`` there
override the architecture's facts (null: use them). The presets are not composed onto the schema,
so a preset's content — and the ids of the cells measured under it — stays what it says.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from harness.energy.config import option


@dataclass(frozen=True)
class PowerSemantics:
    """What one reading (counter, instant field, power usage / ``power.draw``, nvidia-smi) means on one
    device and driver: refresh period, averaging window and lag (seconds; ``None``: not known) and
    where the figures come from (``provenance``: "measured on <device>, driver <v>, <date>" or
    "assumed, from <source>")."""

    update_s: float | None
    window_s: float | None
    note: str
    lag_s: float | None = None
    provenance: str = "assumed"

    def describe(self) -> str:
        """One line: every figure, and where it comes from."""
        ms = lambda x: "unknown" if x is None else f"{x * 1e3:.0f} ms"  # noqa: E731
        return f"update {ms(self.update_s)}, window {ms(self.window_s)}, lag {ms(self.lag_s)} ({self.provenance})"


UNKNOWN = PowerSemantics(None, None, "not characterised; run harness-gpu-check and set gpu.power_window_s",
                         provenance="not known: nothing is assumed")

# NVML architecture codes (pynvml.NVML_DEVICE_ARCH_*) to names.
ARCHITECTURES = {2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere", 8: "ada",
                 9: "hopper", 10: "blackwell"}

YANG = "assumed, from Yang, Adamek & Armour 2023 (nvidia-smi power.draw, drivers of 2023)"
PASCAL_VOLTA = PowerSemantics(0.02, 0.01, "instantaneous: 10 ms average refreshed every 20 ms (Yang et al. 2023)",
                              provenance=YANG)
TURING = PowerSemantics(0.1, 0.1, "100 ms average refreshed every 100 ms (Yang et al. 2023)", provenance=YANG)
PART_TIME = PowerSemantics(0.1, 0.025, "25 ms average refreshed every 100 ms: 25 % of run time seen "
                                       "(Yang et al. 2023, A100/H100)", provenance=YANG)
ONE_SECOND = PowerSemantics(0.1, 1.0, "1 s running average refreshed every 100 ms (nvmlDeviceGetPowerUsage / "
                                      "power.draw on Ampere and later, except GA100)",
                            provenance="assumed, from NVML's documentation of nvmlDeviceGetPowerUsage")
H200_REPORT = "an NVIDIA H200 (reported in issue 30; device id, driver and date not recorded)"
# measured on a real H200: the instant field averages ~117 ms on a 100 ms update (it sees all of the run)
HOPPER_INSTANT = PowerSemantics(0.1, 0.117, "~117 ms average refreshed every 100 ms (sees all of the run)",
                                provenance=f"measured on {H200_REPORT}")
# nvmlDeviceGetPowerUsage (= power.draw) on Hopper: a 1 s running average (NVML documents it; on the H200
# 90 % of a load step showed after 0.96 s)
HOPPER_USAGE = PowerSemantics(0.1, 1.0, "1 s running average refreshed every 100 ms",
                              provenance=f"NVML's documentation for Hopper; measured on {H200_REPORT}: 90 % of a "
                                         "load step after 0.96 s")
HOPPER_H100_INSTANT = PowerSemantics(0.1, 0.025, PART_TIME.note, provenance=(
    f"{YANG}, on H100; the H200 on a current driver showed a ~117 ms window instead: run harness-gpu-check"))
COUNTER = PowerSemantics(None, None, "cumulative energy (mJ since driver load)",
                         provenance="update period and lag measured at run time (not documented)")

# the facts per architecture (and reading where it matters): Yang, Adamek & Armour 2023 (GUIDE §2)
ARCHITECTURE_FACTS: dict[str, PowerSemantics] = {"pascal": PASCAL_VOLTA, "volta": PASCAL_VOLTA, "turing": TURING}


def is_ga100(name: str) -> bool:
    """A100 and A30 use the GA100 die, whose power reading is part-time like H100's."""
    return any(tag in name for tag in ("A100", "A30"))


def power_semantics(architecture: str, name: str, reading: str) -> PowerSemantics:
    """Semantics of ``reading`` ("counter"; "instant" = NVML_FI_DEV_POWER_INSTANT, "average" =
    NVML_FI_DEV_POWER_AVERAGE, "usage" = nvmlDeviceGetPowerUsage, "smi" = nvidia-smi power.draw; see
    ``sources.READINGS``) for a GPU by architecture and name, with where each figure comes from."""
    if reading == "counter":
        return COUNTER
    if architecture == "hopper":
        if reading in ("usage", "smi", "average"):
            return HOPPER_USAGE
        return HOPPER_INSTANT if "H200" in name else HOPPER_H100_INSTANT
    if architecture in ARCHITECTURE_FACTS:
        return ARCHITECTURE_FACTS[architecture]
    if architecture == "ampere" and is_ga100(name):
        return PART_TIME
    if architecture in ("ampere", "ada", "blackwell") and reading in ("usage", "smi", "average"):
        return ONE_SECOND
    return UNKNOWN


def unevenness(window_s: float | None, update_s: float) -> float:
    """How unevenly readings held one update each weigh the instants of a run: the variance of that
    weight (mean 1) times the share of time seen. A part-time reading (window W < update P) weighs
    W/P of the time by P/W and the rest by 0: ``1 - W/P`` (the unseen share). A window longer than
    the update weighs each instant by the number of windows it falls in, ⌊W/P⌋ or ⌊W/P⌋ + 1 (× P/W):
    f(1 - f)/(W/P)² with f the fractional part of W/P (0 for a whole number of updates, e.g. 1 s on
    100 ms; 0.10 for 117 ms on 100 ms). 1 where the window is not known."""
    if window_s is None or not math.isfinite(update_s) or update_s <= 0 or window_s <= 0:
        return 1.0
    r = window_s / update_s
    if r < 1:
        return 1 - r
    f = r - math.floor(r)
    return f * (1 - f) / r ** 2


def apply_profile(semantics: PowerSemantics, profile: dict | None) -> PowerSemantics:
    """Override with a ``gpu`` profile's ``power_update_s`` / ``power_window_s`` where set."""
    profile = profile or {}
    update, window = profile.get("power_update_s"), profile.get("power_window_s")
    if update is None and window is None:
        return semantics
    return PowerSemantics(update if update is not None else semantics.update_s,
                          window if window is not None else semantics.window_s,
                          f"gpu profile '{profile.get('name', '?')}': {profile.get('notes', '')}".strip(),
                          semantics.lag_s, f"set in gpu profile '{profile.get('name', '?')}'")


@dataclass
class GpuProfile:
    """The ``gpu`` config group: which GPU a cell runs on and what its power readings mean."""

    name: str = option("auto", "profile name; 'auto' = detect (the cell's gpu label is then this machine's)")
    power_reading: str = option("auto", "auto | nvml | simulated | none (no power source: energy NaN with the reason)")
    architecture: Optional[str] = option(None, "pascal | volta | turing | ampere | ada | hopper | blackwell; null = "
                                               "detected through NVML")
    match: list[str] = option([], "device-name fragments this profile applies to (others: detected figures)")
    power_update_s: Optional[float] = option(None, "override the power reading's update period (null: inferred, else "
                                                   "the architecture's documented figure)")
    power_window_s: Optional[float] = option(None, "override the power reading's averaging window (null: the "
                                                   "architecture's documented figure; harness-gpu-check measures it)")
    notes: str = option("detected at run time", "where the figures come from")
    simulated: Optional[dict[str, Any]] = option(None, "a simulated GPU (energy.source=simulated): the simulator's "
                                                       "settings")


def register_gpu_schema(cs) -> None:
    """``gpu_schema`` in Hydra's ConfigStore: the schema of every ``conf/gpu`` preset (for a typed cell
    config to compose: ``defaults: [/gpu_schema@_here_]``). A top-level config, like ``cell``, so that it is no
    group option in ``harness --help``."""
    cs.store(name="gpu_schema", node=GpuProfile)
