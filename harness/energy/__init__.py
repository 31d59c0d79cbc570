"""GPU (and host) energy measurement. The runner brackets every measured region through an
:class:`EnergyMeter`; readings land in records as ``energy.*`` fields.

Modules: :mod:`.sources` (NVML energy counter, NVML power, nvidia-smi), :mod:`.sampler`
(polling thread, bounded running integrals), :mod:`.windows` (estimators), :mod:`.phases`
(sensor refreshes, phase aiming), :mod:`.idle` (idle power tracked through a cell),
:mod:`.protocol` (how a workload is measured, adapted to the source), :mod:`.meter` (the
meters, :class:`Measurement` and :func:`make_energy_meter`), :mod:`.hardware` (what each GPU's
power reading means), :mod:`.host` (RAPL host energy), :mod:`.gpustate` (clocks, throttling,
other processes; cool-down), :mod:`.attribution` (energy of sub-windows), :mod:`.simulated`
(an NVML stand-in: tests, studies, ``energy.source=simulated``), :mod:`.probe`
(``harness-power-probe``) and :mod:`.gpu_check` (``harness-gpu-check``).
"""
from harness.energy.config import EnergyConfig
from harness.energy.meter import EnergyMeter, GpuEnergyMeter, Measurement, NullMeter, make_energy_meter
from harness.energy.reading import EnergyReading, summarize_records
from harness.energy.windows import Window

__all__ = ["EnergyConfig", "EnergyMeter", "EnergyReading", "GpuEnergyMeter", "Measurement", "NullMeter", "Window",
           "make_energy_meter", "summarize_records"]
