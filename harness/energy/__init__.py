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
"""
from harness.energy.config import EnergyConfig
from harness.energy.factory import make_energy_meter
from harness.energy.meter import EnergyMeter, GpuEnergyMeter, Measurement, NullMeter
from harness.energy.reading import EnergyReading, summarize_records
from harness.energy.windows import Window

__all__ = ["EnergyConfig", "EnergyMeter", "EnergyReading", "GpuEnergyMeter", "Measurement", "NullMeter", "Window",
           "make_energy_meter", "summarize_records"]
