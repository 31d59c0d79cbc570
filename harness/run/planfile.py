"""A sweep's plan as a file: composed once, read by every array task.

Composing a sweep costs one Hydra composition per cell (the 886-cell ``dsbd_tables`` plan: minutes), so
``harness task INDEX OVERRIDES`` composing the whole plan again in each of N array tasks costs N times
that. ``harness plan --write plan.json OVERRIDES`` writes the composed, resolved config of every cell,
grouped into units (:func:`harness.run.plan.units`), with the harness version and the overrides;
``harness task --plan plan.json INDEX`` reads unit INDEX from it and composes nothing.

The file is written atomically (a task never reads a half-written plan) and checked when read: its
format version, and the unit index against the number of units. Cells keep ``gpu: auto`` unresolved
when so configured (each task labels its cell by the machine it runs on, as without a plan).
"""
from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from harness.errors import ConfigError

FORMAT = "harness-plan/1"


def write_plan(path: str | Path, plan_units: list[list[dict]], overrides: list[str],
               config_dir: str | None = None) -> Path:
    """Write the units (lists of composed cell configs) to ``path`` atomically; returns the path."""
    from harness import __version__

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "harness_version": __version__,
           "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "overrides": list(overrides), "config_dir": config_dir,
           "n_units": len(plan_units), "n_cells": sum(len(u) for u in plan_units), "units": plan_units}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def read_plan(path: str | Path) -> dict:
    """The plan document; :class:`ConfigError` naming the file when it is missing or not a plan."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--plan: plan file not found: {path} "
                          f"(write it with `harness plan --write {path} ...`)") from None
    except (OSError, ValueError) as e:
        raise ConfigError(f"--plan: {path} is not a readable plan file ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("units"), list):
        raise ConfigError(f"--plan: {path} is not a plan file of this harness (format {doc.get('format')!r}, "
                          f"expected {FORMAT!r}); write it with `harness plan --write`")
    return doc


def plan_unit(path: str | Path, index: int) -> list[dict]:
    """Unit ``index`` of the plan file (its cells' configs); ConfigError when out of range."""
    units = read_plan(path)["units"]
    if not 0 <= index < len(units):
        raise ConfigError(f"index {index} is out of range: the plan {path} has {len(units)} units "
                          f"(0..{len(units) - 1})")
    return units[index]


def task_unit(path: str | Path, index: int, overrides: list[str]) -> list[dict]:
    """``harness task --plan PATH INDEX [key=value ...]``: the unit's cell configs. Overrides may set only
    result-neutral keys (:data:`harness.config.identity.RESULT_NEUTRAL_KEYS`: ``results_dir=`` for node-local
    scratch, ``force=``, ...); anything else would change the cells the plan names, so it is refused."""
    import copy

    import yaml

    from harness.config.identity import RESULT_NEUTRAL_KEYS

    unit = copy.deepcopy(plan_unit(path, index))
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep or key not in RESULT_NEUTRAL_KEYS:
            raise ConfigError(f"harness task --plan: '{override}' would change the cells the plan names; with --plan "
                              f"only these keys may be set: {', '.join(RESULT_NEUTRAL_KEYS)}. Write a new plan with "
                              f"`harness plan --write {path} ...`")
        parsed = yaml.safe_load(value) if value else None
        for cfg in unit:
            *parents, last = key.split(".")
            node = cfg
            for p in parents:
                node = node.setdefault(p, {})
            node[last] = parsed
    return unit
