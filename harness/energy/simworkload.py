"""Simulated GPUs selected from configuration (``energy.source=simulated gpu=sim_h100``): they draw
power while the meter's workload (the decoder's generation) runs, so the whole runner path can be
exercised on a CPU and checked against the exact integral."""
from __future__ import annotations

import contextlib
import random

import pynvml

from harness.energy.simulated import SimGPU, SimulatedNVML

ARCHITECTURE_CODES = {"pascal": pynvml.NVML_DEVICE_ARCH_PASCAL, "volta": pynvml.NVML_DEVICE_ARCH_VOLTA,
                      "turing": pynvml.NVML_DEVICE_ARCH_TURING, "ampere": pynvml.NVML_DEVICE_ARCH_AMPERE,
                      "ada": pynvml.NVML_DEVICE_ARCH_ADA, "hopper": pynvml.NVML_DEVICE_ARCH_HOPPER}
SIM_GPU_KEYS = ("name", "idle_w", "ripple_w", "power_update_s", "power_window_s", "usage_window_s", "counter_update_s",
                "counter_resolution_j", "counter_lag_s", "has_counter", "has_instant", "power_limit_w",
                "idle_ramp_w_per_s", "idle_wave_w", "idle_wave_period_s", "hysteresis_w", "hysteresis_s")
WORKLOAD_KEYS = ("active_w", "prefill_w", "prefill_s")


class SimulatedWorkloadGPUs:
    """Simulated GPUs whose power follows the meter's workload: ``activity()`` wraps each run of
    the workload (the decoder's generation), during which every GPU draws ``prefill_w`` for the
    first ``prefill_s`` then ``active_w``; idle otherwise. Built from a ``gpu`` profile's
    ``simulated`` section."""

    def __init__(self, spec: dict, clock):
        spec = dict(spec)
        unknown = sorted(set(spec) - set(SIM_GPU_KEYS) - set(WORKLOAD_KEYS) - {"gpus", "architecture"})
        if unknown:
            raise ValueError(f"unknown gpu.simulated option(s) {unknown}; valid: "
                             f"{', '.join(sorted(SIM_GPU_KEYS + WORKLOAD_KEYS + ('gpus', 'architecture')))}")
        self.active_w = float(spec.get("active_w", 300.0))
        self.prefill_w = float(spec.get("prefill_w", self.active_w))
        self.prefill_s = float(spec.get("prefill_s", 0.0))
        arch = spec.get("architecture", "hopper")
        kwargs = {k: spec[k] for k in SIM_GPU_KEYS if spec.get(k) is not None}
        kwargs.setdefault("name", "Simulated GPU")
        kwargs["architecture"] = ARCHITECTURE_CODES.get(arch, pynvml.NVML_DEVICE_ARCH_HOPPER)
        rng = random.Random(0)
        self.gpus = [SimGPU(clock, uuid=f"GPU-simulated-{i}", power_phase_s=rng.uniform(0, 0.1),
                            counter_phase_s=rng.uniform(0, 0.1), **kwargs) for i in range(int(spec.get("gpus", 1)))]
        self.nvml = SimulatedNVML(self.gpus, clock)

    @contextlib.contextmanager
    def activity(self):
        pieces = [(self.prefill_s, self.prefill_w)] if self.prefill_s > 0 else []
        for gpu in self.gpus:
            gpu.schedule(pieces, then=self.active_w)
        try:
            yield
        finally:
            for gpu in self.gpus:
                gpu.hold(gpu.idle_w)
