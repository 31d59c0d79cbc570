"""The meter for one cell, from its ``energy`` config and the CUDA devices its models use."""
from __future__ import annotations

import dataclasses
from typing import Callable

from harness.energy.config import EnergyConfig
from harness.energy.host import HostEnergy
from harness.energy.meter import EnergyMeter, GpuEnergyMeter, NullMeter
from harness.energy.sampler import RealClock
from harness.energy.sources import open_sources
from harness.errors import ConfigError


def cuda_synchronizer(cuda_devices: list[int]) -> Callable[[], None]:
    """Waits for queued work on every device in use (so windows bracket the GPU's real work)."""
    if not cuda_devices:
        return lambda: None
    import torch

    if not torch.cuda.is_available():
        return lambda: None

    def synchronize() -> None:
        for device in cuda_devices:
            torch.cuda.synchronize(device)

    return synchronize


def _simulated_profiles() -> str:
    from harness.resources import conf_dir

    names = sorted(p.stem for p in (conf_dir() / "gpu").glob("sim_*.yaml"))
    return "gpu=" + " | ".join(names) if names else "a gpu profile with a 'simulated' section"


def make_energy_meter(cfg=None, cuda_devices: list[int] | None = None, *, nvml=None, clock=None,
                      synchronize: Callable[[], None] | None = None) -> EnergyMeter:
    """The meter for one cell: ``cfg`` is the ``energy`` config (dict, OmegaConf node, EnergyConfig
    or None for the protocol defaults); ``cuda_devices`` the CUDA indices the models use. ``nvml``,
    ``clock`` and ``synchronize`` are for tests (simulated NVML, virtual time).

    With ``energy.source=simulated`` — or ``auto`` with a simulated ``gpu`` profile (``gpu=sim_h100``):
    selecting a simulated GPU selects the simulated source — the GPUs are simulated from the profile's
    ``simulated`` section whatever the models run on (a CPU-only run of the whole path)."""
    config = EnergyConfig.from_any(cfg)
    if config.source == "none":
        return NullMeter(f"energy measurement is off (energy={config.name})")
    host = HostEnergy(config.powercap_root) if config.host else None
    profile = config.gpu or {}
    if profile.get("simulated") and config.source == "auto":  # selecting a simulated GPU selects its source
        config = dataclasses.replace(config, source="simulated")
    if profile.get("simulated") and config.source not in ("simulated", "none"):
        raise ConfigError(f"gpu={profile.get('name')} is a simulated GPU, but energy.source={config.source} reads "
                          f"real hardware: use energy.source=auto (or simulated) with it, or a real gpu profile")
    if config.source == "simulated":
        return _simulated_meter(config, profile, list(cuda_devices or []), clock, synchronize, host)
    if profile.get("power_reading") == "none":
        return NullMeter(f"gpu profile '{profile.get('name')}' has no power reading: {profile.get('notes', '')}", host)
    if not cuda_devices:
        return NullMeter("no GPU in use: this cell ran on the CPU (GPU energy not applicable)", host)
    sources = open_sources(list(cuda_devices), config.source, nvml)
    usable = (sources.counter if config.source == "counter" else (sources.counter or sources.power)
              if config.source == "auto" else sources.power)
    if usable is None:
        sources.close()
        missing = "; ".join(f"{k}: {v}" for k, v in sources.missing.items()) or "no source found"
        return NullMeter(f"no usable power source (energy.source={config.source}) for CUDA devices "
                         f"{list(cuda_devices)}: {missing}", host)
    return GpuEnergyMeter(sources, config, clock, synchronize or cuda_synchronizer(list(cuda_devices)), host=host,
                          exact=getattr(nvml, "exact_energy", None), exact_net=getattr(nvml, "exact_net_energy", None))


def _simulated_meter(config: EnergyConfig, profile: dict, cuda_devices: list[int], clock, synchronize,
                     host) -> GpuEnergyMeter:
    from harness.energy.simworkload import SimulatedWorkloadGPUs

    spec = profile.get("simulated")
    if not spec:
        raise ConfigError(f"energy.source=simulated needs a gpu profile with a 'simulated' section; gpu profile "
                          f"'{profile.get('name')}' has none. Choose {_simulated_profiles()}")
    clock = clock or RealClock()
    try:
        sim = SimulatedWorkloadGPUs(spec, clock)
    except ValueError as e:
        raise ConfigError(f"gpu '{profile.get('name')}': {e}") from e
    sources = open_sources(list(range(len(sim.gpus))), "auto", sim.nvml, by_index=True)
    return GpuEnergyMeter(sources, config, clock, synchronize or cuda_synchronizer(cuda_devices),
                          activity=sim.activity, host=host, exact=sim.nvml.exact_energy,
                          exact_net=sim.nvml.exact_net_energy)
