"""What a GPU's power reading means: how often it is refreshed and how long a stretch of
time each reading averages (Yang, Adamek & Armour 2023; GUIDE §2).

A reading that averages ``window_s`` out of every ``update_s`` sees only that fraction of
the run ("part-time" power: 25 ms of every 100 ms on A100/H100). These figures feed the
coverage estimate, the timestamp alignment and the phase-shifting delays. The update period
is also inferred on the machine by fast polling; the averaging window cannot be, so it comes
from here or from a ``conf/gpu`` profile. ``None`` means not known: nothing is made up.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PowerSemantics:
    """Refresh period and averaging window (seconds) of one power field on one GPU."""

    update_s: float | None
    window_s: float | None
    note: str


UNKNOWN = PowerSemantics(None, None, "not characterised; run harness-power-probe and set gpu.power_window_s")

# NVML architecture codes (pynvml.NVML_DEVICE_ARCH_*) to names.
ARCHITECTURES = {2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere", 8: "ada",
                 9: "hopper", 10: "blackwell"}

_PASCAL_VOLTA = PowerSemantics(0.02, 0.01, "instantaneous: 10 ms average refreshed every 20 ms (Yang et al. 2023)")
_TURING = PowerSemantics(0.1, 0.1, "100 ms average refreshed every 100 ms (Yang et al. 2023)")
_PART_TIME = PowerSemantics(0.1, 0.025, "25 ms average refreshed every 100 ms: 25 % of run time seen "
                                        "(Yang et al. 2023, A100/H100)")
_ONE_SECOND = PowerSemantics(0.1, 1.0, "1 s running average (nvmlDeviceGetPowerUsage on Ampere and later, "
                                       "except GA100)")


def is_ga100(name: str) -> bool:
    """A100 and A30 use the GA100 die, whose power reading is part-time like H100's."""
    return any(tag in name for tag in ("A100", "A30"))


def power_semantics(architecture: str, name: str, field: str) -> PowerSemantics:
    """Semantics of ``field`` ("instant" = NVML_FI_DEV_POWER_INSTANT, "usage" =
    nvmlDeviceGetPowerUsage, "smi" = nvidia-smi power.draw) for a GPU by architecture and name."""
    if architecture in ("pascal", "volta"):
        return _PASCAL_VOLTA
    if architecture == "turing":
        return _TURING
    if architecture == "hopper" or (architecture == "ampere" and is_ga100(name)):
        return _PART_TIME
    if architecture in ("ampere", "ada") and field in ("usage", "smi"):
        return _ONE_SECOND
    return UNKNOWN


def apply_profile(semantics: PowerSemantics, profile: dict | None) -> PowerSemantics:
    """Override with a ``conf/gpu`` profile's ``power_update_s`` / ``power_window_s`` where set."""
    profile = profile or {}
    update, window = profile.get("power_update_s"), profile.get("power_window_s")
    if update is None and window is None:
        return semantics
    return PowerSemantics(update if update is not None else semantics.update_s,
                          window if window is not None else semantics.window_s,
                          f"gpu profile '{profile.get('name', '?')}': {profile.get('notes', '')}".strip())
