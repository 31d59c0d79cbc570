"""GPU (and host) energy measurement. The runner brackets every measured region through an
:class:`EnergyMeter`; readings land in records as ``energy.*`` fields.

Layers, bottom up: :mod:`.hardware` (what each GPU's power reading means; the ``gpu`` profile
schema), :mod:`.config` (``EnergyConfig``, the ``energy`` schema and its defaults), :mod:`.sources`
(NVML energy counter, NVML power, nvidia-smi; one name per reading), :mod:`.series` and
:mod:`.sampler` (polling thread, running integrals, gaps), :mod:`.phases` (refreshes, grids, phase
aiming), :mod:`.sensors` (update period, jitter, counter resolution and lag as measured),
:mod:`.idle` (post-work and settled idle), :mod:`.gpustate` (clocks, throttling, other processes;
cool-down; state during the cell), :mod:`.host` (RAPL host energy); then :mod:`.state` (what a
meter keeps through a cell), the protocols :mod:`.counter`, :mod:`.polled` and :mod:`.plain`
(run + reading + error bound each) with :mod:`.readout` (fields every reading shares) and
:mod:`.crosscheck`; :mod:`.meter` (``EnergyMeter``, ``Measurement``), :mod:`.factory`
(``make_energy_meter``), :mod:`.attribution` (energy of sub-windows), :mod:`.cost` (expected
overhead, for ``harness plan``), :mod:`.characterize` (sensor properties on a known load, for
``harness-gpu-check``). :mod:`.simulated` and :mod:`.simloads`: an NVML stand-in and load shapes
(tests, studies, ``energy.source=simulated``). Console tools are in :mod:`harness.tools`.

The names below load their module when first used, so that the torch- and numpy-free :mod:`.config` and
:mod:`.hardware` (the config's schemas: ``harness --help``) import alone.
"""
from __future__ import annotations

import importlib
from typing import Any

_MODULES = {"config": ("EnergyConfig",), "factory": ("make_energy_meter",),
            "meter": ("EnergyMeter", "GpuEnergyMeter", "Measurement", "NullMeter"),
            "reading": ("EnergyReading", "summarize_records"), "windows": ("Window",)}
__all__ = ["EnergyConfig", "EnergyMeter", "EnergyReading", "GpuEnergyMeter", "Measurement", "NullMeter", "Window",
           "make_energy_meter", "summarize_records"]


def __getattr__(name: str) -> Any:
    for module, names in _MODULES.items():
        if name in names:
            return getattr(importlib.import_module(f"{__name__}.{module}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
