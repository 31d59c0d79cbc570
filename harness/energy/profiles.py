"""Sensor profiles measured on this machine: what each reading means on one device and driver.

``harness-gpu-check`` measures every reading it can open (update period, averaging window, lag) on a
known load and writes one file per device (:func:`save`): ``<dir>/<device uuid>.json`` with the
device's name, uuid, driver and the date, under :func:`profile_dir` (``$HARNESS_SENSOR_PROFILES``,
else ``~/.cache/harness/sensor-profiles``). A meter loads the file of each device it uses
(:func:`apply`): a measured figure replaces the documented or assumed one of
:mod:`harness.energy.hardware`, and says where it was measured. A file written under another driver
is not used (the driver decides what a reading averages), and the meter says so.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from harness.energy.hardware import PowerSemantics

ENV = "HARNESS_SENSOR_PROFILES"


def profile_dir() -> Path:
    """Where sensor profiles live: ``$HARNESS_SENSOR_PROFILES``, else ``~/.cache/harness/sensor-profiles``."""
    return Path(os.environ.get(ENV) or Path.home() / ".cache" / "harness" / "sensor-profiles")


def _number(figure) -> float | None:
    value = figure.get("value") if isinstance(figure, dict) else figure
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def profile_from_figures(device: dict, readings: dict[str, dict], date: str | None = None) -> dict:
    """A profile: ``device`` (name, uuid, driver) and per reading (channel name) its measured
    ``update_s`` / ``window_s`` / ``lag_s`` (``None`` where not measured) and how each was obtained."""
    return {"device": {**device, "date": date or time.strftime("%Y-%m-%d")},
            "readings": {name: {k: _number(v) for k, v in figs.items() if k in ("update_s", "window_s", "lag_s")}
                         | {"how": {k: v.get("how", "") for k, v in figs.items() if isinstance(v, dict)}}
                         for name, figs in readings.items()}}


def profile_of(sources, figures: dict, channels) -> dict:
    """The profile of device 0 of ``sources`` from ``harness-gpu-check``'s figures
    (:func:`harness.energy.characterize.characterize_sources`) for ``channels``."""
    from harness.energy.characterize import sensor_profile

    device = sources.devices[0]
    return profile_from_figures({"name": device.name, "uuid": device.uuid, "driver": sources.driver},
                                sensor_profile(figures, [c.name for c in channels]))


def save(profile: dict, folder: Path | None = None) -> Path:
    folder = Path(folder) if folder is not None else profile_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{profile['device'].get('uuid') or 'unknown'}.json"
    path.write_text(json.dumps(profile, indent=2))
    return path


def load(uuid: str, folder: Path | None = None) -> dict | None:
    path = (Path(folder) if folder is not None else profile_dir()) / f"{uuid}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def measured(base: PowerSemantics | None, figures: dict, device: dict) -> PowerSemantics:
    """``base`` with the figures a profile measured, and their provenance."""
    base = base or PowerSemantics(None, None, "")
    where = (f"measured on {device.get('name', '?')} {device.get('uuid', '?')}, driver {device.get('driver', '?')}, "
             f"{device.get('date', '?')} (harness-gpu-check)")
    got = {k: figures.get(k) for k in ("update_s", "window_s", "lag_s") if figures.get(k) is not None}
    missing = [k for k in ("update_s", "window_s", "lag_s") if k not in got]
    provenance = where + (f"; {', '.join(missing)}: {base.provenance}" if missing and base.provenance else "")
    return PowerSemantics(got.get("update_s", base.update_s), got.get("window_s", base.window_s), base.note,
                          got.get("lag_s", base.lag_s), provenance)


def apply(sources, folder: Path | None = None) -> list[str]:
    """Give every channel of ``sources`` the semantics measured for its devices (``channel.per_device``:
    one :class:`PowerSemantics` per device; ``channel.semantics``: device 0's). Notes on what was not used."""
    notes: list[str] = []
    for channel in sources.channels():
        per_device = []
        for device in sources.devices[:len(channel.handles)]:
            sem = channel.semantics
            profile = load(device.uuid, folder) if device.uuid else None
            if profile is not None:
                their = str(profile.get("device", {}).get("driver"))
                if sources.driver and their != str(sources.driver):
                    notes.append(f"sensor profile of {device.uuid} was measured with driver {their}, this is "
                                 f"{sources.driver}: not used (run harness-gpu-check again)")
                elif channel.name in profile.get("readings", {}):
                    sem = measured(sem, profile["readings"][channel.name], profile["device"])
            per_device.append(sem)
        if per_device:
            channel.per_device = per_device
            channel.semantics = per_device[0]
    return notes
