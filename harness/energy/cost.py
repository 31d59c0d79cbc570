"""What measuring energy will cost a cell, before it runs (``harness plan`` prints it per cell).

The protocols' overhead is predictable from the configuration and the GPU profile:

* **energy counter** (Volta and later): start-up (update-period inference while the GPU settles,
  then the idle baseline), about two counter updates per prompt (the lead refresh, the tail refresh
  and the post-work idle interval), the settled-idle wait (``idle_settle_s`` + 0.5 s) after the
  first prompt and every ``idle_settled_every_s`` where hysteresis shows; a generation is repeated
  only while its expected bound exceeds ``target_bound`` (sub-0.1 s generations);
* **polled power only**: every prompt runs in ``max(trials, phase_shifts)`` trials, each at least
  ``min_window_s`` of runs (or ``min_repetitions`` runs), with idle around each trial;
* the papers' 1 Hz sum (``energy=naive``) and ``energy=off``: nothing beyond the sampler.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness.energy.config import EnergyConfig
from harness.energy.hardware import power_semantics

COUNTER_ARCHITECTURES = ("volta", "turing", "ampere", "ada", "hopper", "blackwell")


@dataclass(frozen=True)
class Overhead:
    """Expected measurement overhead of one cell (seconds of wall time beyond the generations)."""

    kind: str                      # counter | polled | plain | none
    startup_s: float = 0.0
    per_prompt_s: float = 0.0      # counter: edge waits; polled: idle around the trials
    settle_s: float = 0.0          # one settled-idle wait
    settle_every_s: float = math.inf
    trials: int = 1                # polled: trials per prompt, each ≥ window_s of runs
    window_s: float = 0.0
    note: str = ""

    def seconds(self, prompts: int, generation_s: float) -> float:
        """Expected overhead of ``prompts`` generations of ``generation_s`` each."""
        if self.kind == "polled":
            return self.startup_s + prompts * self.trials * (max(generation_s, self.window_s) + self.per_prompt_s) \
                - prompts * generation_s
        busy = prompts * (generation_s + self.per_prompt_s)
        settles = 1 + busy / self.settle_every_s if self.settle_s else 0
        return self.startup_s + prompts * self.per_prompt_s + settles * self.settle_s

    def line(self) -> str:
        if self.kind == "none":
            return self.note
        if self.kind == "plain":
            return f"{self.note}: +{self.startup_s:.1f} s start-up, nothing per prompt"
        if self.kind == "polled":
            return (f"{self.note}: +{self.startup_s:.1f} s start-up; each prompt {self.trials} trials × "
                    f"(max(generation, {self.window_s:g} s) + {self.per_prompt_s:.2f} s)")
        settle = (f", +{self.settle_s:.1f} s settled-idle wait after the first prompt and every "
                  f"{self.settle_every_s:g} s (skipped without hysteresis)" if self.settle_s else "")
        return f"{self.note}: +{self.startup_s:.1f} s start-up, +{self.per_prompt_s:.2f} s per prompt{settle}"


def _counter_period(gpu: dict) -> tuple[bool | None, float]:
    """(counter expected?, its update period) from the gpu profile."""
    sim = gpu.get("simulated") or {}
    if gpu.get("power_reading") == "simulated":
        return bool(sim.get("has_counter", True)), float(sim.get("counter_update_s", 0.1))
    arch = gpu.get("architecture")
    return (arch in COUNTER_ARCHITECTURES) if arch else None, 0.1


def expected_overhead(cfg: dict) -> Overhead:
    """The overhead one cell's ``energy`` and ``gpu`` configuration implies (see the module docstring)."""
    gpu = cfg.get("gpu") or {}
    energy = EnergyConfig.from_any({**(cfg.get("energy") or {}), "gpu": None})
    if energy.source == "none" or gpu.get("power_reading") == "none":
        return Overhead("none", note="none (energy not measured)")
    if gpu.get("name") == "cpu" and energy.source != "simulated":
        return Overhead("none", note="none (no GPU: GPU energy not measured)")
    has_counter, period = _counter_period(gpu)
    infer = energy.infer_update_period_s
    startup = max(infer, energy.idle_settle_s) + max(energy.idle_baseline_s, 2.5 * period if infer else 0.0) \
        + energy.cooldown_s
    if not energy.protocol:
        return Overhead("plain", startup_s=startup, note=f"one plain window per prompt ({energy.name})")
    use_counter = energy.source in ("auto", "counter", "simulated") and has_counter is not False
    if use_counter:
        settle = energy.idle_settle_s + 0.5 if energy.idle_settle_s > 0 and energy.idle_every_s is not None else 0.0
        guess = "" if has_counter else " (expected on this GPU; polled power if it has none)"
        return Overhead("counter", startup_s=startup, per_prompt_s=2 * period, settle_s=settle,
                        settle_every_s=energy.idle_settled_every_s, note=f"energy counter{guess}")
    name = ((gpu.get("simulated") or {}).get("name") or " ".join(gpu.get("match") or []))
    reading = {"power-usage": "usage", "smi": "smi"}.get(energy.source, "instant")
    sem = power_semantics(gpu.get("architecture") or "", name, reading)
    if sem.window_s is not None:  # the start-up idle spans ≥ 4.5 averaging windows (MeterState._baseline)
        startup += max(0.0, 4.5 * sem.window_s - max(energy.idle_baseline_s, 2.5 * period if infer else 0.0))
    part_time = sem.window_s is None or sem.update_s is None or sem.window_s < sem.update_s
    trials = max(energy.trials, energy.phase_shifts) if part_time and energy.phase_shifts > 1 else energy.trials
    around = sum(energy.trial_delay_s) / 2 + 0.025 + 2.5 * 0.1  # delay, then W + P before and W + 1.5 P after
    if energy.self_check is not False and gpu.get("power_window_s") is None:  # the start-up load step (one run or more)
        from harness.energy.selfcheck import POST_S, PRE_S, STEP_S

        startup += PRE_S + STEP_S + POST_S
    return Overhead("polled", startup_s=startup, per_prompt_s=around, trials=trials, window_s=energy.min_window_s,
                    note="polled power only")


def overhead_line(cfg: dict) -> str:
    """One line for ``harness plan``: the expected energy-measurement overhead of this cell."""
    try:
        return expected_overhead(cfg).line()
    except Exception as e:  # noqa: BLE001 — a plan row never fails on this (validation reports bad configs)
        return f"unknown ({e})"
