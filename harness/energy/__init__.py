"""GPU energy measurement. The runner brackets every measured region through an
:class:`EnergyMeter`; readings land in records as ``energy.*`` fields.

Modules: :mod:`.sources` (NVML energy counter, NVML power, nvidia-smi), :mod:`.sampler`
(polling thread), :mod:`.windows` (energy over intervals), :mod:`.protocol` (Yang, Adamek &
Armour 2023), :mod:`.hardware` (what each GPU's power reading means), :mod:`.meter` (the
meters and :func:`make_energy_meter`), :mod:`.simulated` (an NVML stand-in for tests) and
:mod:`.probe` (``harness-power-probe``).
"""
from harness.energy.config import EnergyConfig
from harness.energy.meter import EnergyMeter, GpuEnergyMeter, NullMeter, make_energy_meter
from harness.energy.reading import EnergyReading, summarize_records
from harness.energy.windows import Window

__all__ = ["EnergyConfig", "EnergyMeter", "EnergyReading", "GpuEnergyMeter", "NullMeter", "Window",
           "make_energy_meter", "summarize_records"]
