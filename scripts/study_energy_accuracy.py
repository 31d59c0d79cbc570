"""Accuracy and cost of the energy meter on simulated GPUs, in virtual time (issue 13, item 3).

Each scenario is a cell of prompts on a simulated GPU (``harness/energy/simulated.py``: known
power waveform, NVML-like sensors, virtual clock): generations of a given length and power
shape, a little runner work between prompts (a 0.1 s GPU burst like the output-perplexity pass,
then 0.1 s on the CPU). Every meter configuration measures the same cell; per prompt the
estimate is compared with the simulator's exact integral (gross and net of idle), and the cell's
virtual wall time with the meter is divided by the same cell without it (``energy=off``: each
generation once, same runner work) — meter start-up (period inference, idle baseline) included.

A repeated run of a prompt draws the same power trace (a deterministic generation). Meters:
``counter`` (energy=protocol, NVML energy counter), ``polled`` (energy=protocol, polled power
only), ``naive`` (energy=naive: 1 Hz power.draw summed). ``--baseline-root DIR`` runs the same
scenarios against another checkout's meter (e.g. ``/work/main`` before issue 13) with this
tree's simulator, for before/after tables.

    python scripts/study_energy_accuracy.py [--seeds 3] [--prompts 8] [--only NAME] [--json FILE]
    python scripts/study_energy_accuracy.py --baseline-root /work/main
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import random
import statistics
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def load_simulator():
    """This tree's simulator as a standalone module (it imports nothing from the harness)."""
    spec = importlib.util.spec_from_file_location("energy_simulator", HERE / "harness" / "energy" / "simulated.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sim = load_simulator()

NAIVE = {"name": "naive", "source": "power-usage", "sample_hz": 1, "integration": "sum", "skip_unchanged": False,
         "align_timestamps": False, "protocol": False, "min_window_s": 0.0, "min_repetitions": 1, "trials": 1,
         "trial_delay_s": [0.0, 0.0], "phase_shifts": 1, "discard_rise_s": 0.0, "idle_baseline_s": 0.0,
         "infer_update_period_s": 0.0, "seed": 0}


@dataclass
class Scenario:
    name: str
    note: str
    lengths: tuple[float, float]
    meters: tuple[str, ...] = ("counter", "polled")
    load: str = "bursty"            # bursty | square:<period>:<duty> | prefill | ramp:<rise>
    gpu: dict = field(default_factory=dict)
    profile: dict | None = None     # conf/gpu-like figures (power_update_s / power_window_s) the meter is told
    polled_source: str = "power"
    infer: bool = True
    stall_hz: float | None = None
    drift: bool = False


SCENARIOS = [
    Scenario("bursty 6-12 s", "decode-like bursts, H100 sensors (issue's generation lengths)", (6, 12),
             ("counter", "polled", "naive")),
    Scenario("bursty 1-3 s", "decode-like bursts, H100 sensors", (1, 3), ("counter", "polled", "naive")),
    Scenario("bursty 1 s", "the cost bound: every generation 1 s", (1, 1), ("counter",)),
    Scenario("short 0.3-0.8 s", "windows shorter than 10 counter updates: repeated", (0.3, 0.8)),
    Scenario("10 Hz, sensor 100.3 ms", "issue: periodic load at the sensor rate, inexact period", (3, 8),
             load="square:0.1:0.5", gpu={"power_update_s": 0.1003}),
    Scenario("10 Hz, believed 99.6 ms", "issue: exact 100 ms sensor, period taken as 99.6 ms", (3, 8),
             load="square:0.1:0.5", profile={"name": "p996", "power_update_s": 0.0996, "power_window_s": 0.025},
             infer=False),
    Scenario("10 Hz, believed 100.2 ms", "issue: exact 100 ms sensor, period taken as 100.2 ms", (3, 8),
             load="square:0.1:0.5", profile={"name": "p1002", "power_update_s": 0.1002, "power_window_s": 0.025},
             infer=False),
    Scenario("9.9 Hz square", "square wave near the sensor rate", (3, 8), load="square:0.10101:0.4"),
    Scenario("20 Hz square", "square wave at twice the sensor rate", (3, 8), load="square:0.05:0.3"),
    Scenario("5 Hz square", "square wave at half the sensor rate", (3, 8), load="square:0.2:0.5"),
    Scenario("idle 60-90 W drift", "issue: idle drifting 60→90 W over the cell (net energy)", (2, 6),
             gpu={"idle_w": 75.0, "idle_wave_w": 15.0, "idle_wave_period_s": 120.0, "idle_wave_phase": -math.pi / 2},
             drift=True),
    Scenario("power.draw 1 s avg (Ada)", "issue: 1 s-averaged nvmlDeviceGetPowerUsage only, no instant field",
             (2, 8), gpu={"name": "NVIDIA L40S", "architecture": 8, "has_instant": False, "usage_window_s": 1.0,
                          "idle_w": 35.0}, profile={"name": "l40", "architecture": "ada"},
             polled_source="power-usage"),
    Scenario("prefill plateau", "issue: windows opening on a 120 ms prefill plateau at 520 W", (1, 4),
             ("counter",), load="prefill"),
    Scenario("thermal ramp +15 %", "power rising 15 % through each generation", (3, 8), load="ramp:0.15"),
    Scenario("Volta 20/10 ms", "V100 sensors: 10 ms average every 20 ms, counter every 20 ms", (1, 4),
             gpu={"name": "Tesla V100-SXM2-32GB", "architecture": 5, "power_update_s": 0.02, "power_window_s": 0.01,
                  "counter_update_s": 0.02}),
    Scenario("Turing 100/100 ms", "T4 sensors: 100 ms average every 100 ms", (1, 4), ("polled",),
             gpu={"name": "Tesla T4", "architecture": 6, "power_window_s": 0.1}),
    Scenario("coarse counter", "counter every 200 ms in 10 mJ steps", (2, 6), ("counter",),
             gpu={"counter_update_s": 0.2, "counter_resolution_j": 0.01}),
    Scenario("starved sampler", "sampler at 16 Hz (GIL held) on Volta's 20 ms sensor", (2, 6), ("polled",),
             gpu={"name": "Tesla V100-SXM2-32GB", "architecture": 5, "power_update_s": 0.02, "power_window_s": 0.01},
             stall_hz=16.0),
]


def pieces_for(scenario: Scenario, rng: random.Random, seconds: float):
    kind, *args = scenario.load.split(":")
    if kind == "bursty":
        return sim.llm_like_load(rng, seconds)
    if kind == "square":
        period, duty = float(args[0]), float(args[1])
        offset = rng.uniform(0, period)
        return [(offset, 110.0)] + sim.square_wave(period, duty, 420.0, 100.0, seconds - offset)
    if kind == "prefill":
        return sim.prefill_then_decode(rng, seconds)
    if kind == "ramp":
        return sim.thermal_ramp(sim.llm_like_load(rng, seconds), float(args[0]))
    raise ValueError(scenario.load)


def meter_config(scenario: Scenario, meter: str) -> dict:
    if meter == "naive":
        cfg = dict(NAIVE)
    else:
        cfg = {"source": "counter" if meter == "counter" else scenario.polled_source}
        if not scenario.infer:
            cfg["infer_update_period_s"] = 0.0
    if scenario.profile is not None:
        cfg["gpu"] = dict(scenario.profile)
    return cfg


def run_cell(make_energy_meter, scenario: Scenario, meter: str, seed: int, prompts: int) -> dict:
    rng = random.Random(seed)
    clock = sim.SimClock(1000.0 + 17.3 * seed)
    gpu_kwargs = {"power_phase_s": rng.uniform(0, 0.1), "counter_phase_s": rng.uniform(0, 0.1), **scenario.gpu}
    gpu = sim.SimGPU(clock, **gpu_kwargs)
    nvml = sim.SimulatedNVML([gpu], clock)
    begin = clock.now()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        energy_meter = make_energy_meter(meter_config(scenario, meter), [0], nvml=nvml, clock=clock)
    if scenario.stall_hz:
        clock.stall(math.inf, 1 / scenario.stall_hz)
    off_time, rows = 0.0, []
    for _ in range(prompts):
        seconds = rng.uniform(*scenario.lengths)
        shape = pieces_for(scenario, rng, seconds)

        def workload():
            start = clock.now()
            drift = gpu.idle_power(start) - gpu.idle_w if scenario.drift else 0.0
            energy = gpu.run([(s, w + drift) for s, w in shape])
            return energy, start, clock.now()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            measured = energy_meter.measure("prompt", workload)
        results, reading = (measured.results, measured.reading) if hasattr(measured, "reading") else measured
        gross = sum(r[0] for r in results)
        net = sum(gpu.net_energy(r[1], r[2]) for r in results)
        bound = getattr(reading, "error_bound", math.nan)
        net_bound = getattr(reading, "net_error_bound", math.nan)
        est_net = reading.net_energy_j * reading.repetitions
        rows.append({"gross": (reading.total_energy_j - gross) / gross,
                     "net": (est_net - net) / net if math.isfinite(est_net) else math.nan,
                     "bound": bound, "net_bound": net_bound, "runs": len(results), "reason": reading.reason})
        off_time += results[0][2] - results[0][1]
        gpu.run([(0.1, 250.0)])  # the runner's output-perplexity pass on the GPU
        clock.sleep(0.1)          # and its CPU work
        off_time += 0.2
    energy_meter.close()
    return {"rows": rows, "ratio": (clock.now() - begin) / off_time}


def summarize(cells: list[dict]) -> dict:
    rows = [r for c in cells for r in c["rows"]]
    gross = [abs(r["gross"]) for r in rows if math.isfinite(r["gross"])]
    net = [abs(r["net"]) for r in rows if math.isfinite(r["net"])]
    bounds = [r for r in rows if math.isfinite(r["bound"]) and math.isfinite(r["gross"])]
    net_bounds = [r for r in rows if math.isfinite(r["net_bound"]) and math.isfinite(r["net"])]
    return {"prompts": len(rows), "nan": sum(1 for r in rows if not math.isfinite(r["gross"])),
            "gross_mean": statistics.mean(gross) if gross else math.nan, "gross_worst": max(gross, default=math.nan),
            "net_mean": statistics.mean(net) if net else math.nan, "net_worst": max(net, default=math.nan),
            "runs_per_prompt": statistics.mean(r["runs"] for r in rows),
            "cost_ratio": statistics.mean(c["ratio"] for c in cells),
            "bound_holds": (sum(abs(r["gross"]) <= r["bound"] for r in bounds) / len(bounds)) if bounds else math.nan,
            "bound_median": statistics.median(r["bound"] for r in bounds) if bounds else math.nan,
            "net_bound_holds": (sum(abs(r["net"]) <= r["net_bound"] for r in net_bounds) / len(net_bounds))
            if net_bounds else math.nan}


def pct(x: float) -> str:
    return "   n/a" if not math.isfinite(x) else f"{100 * x:6.2f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per cell")
    parser.add_argument("--only", help="run scenarios whose name contains this")
    parser.add_argument("--meters", default="counter,polled,naive")
    parser.add_argument("--baseline-root", help="measure with the harness of this checkout instead (before/after)")
    parser.add_argument("--json", help="write the table as JSON here")
    args = parser.parse_args(argv)
    root = Path(args.baseline_root).resolve() if args.baseline_root else HERE
    sys.path.insert(0, str(root))
    from harness.energy import make_energy_meter

    wanted = set(args.meters.split(","))
    table = []
    print(f"meter from {root}; {args.seeds} seeds × {args.prompts} prompts per scenario; errors in %")
    print(f"{'scenario':28s} {'meter':8s} {'gross mean':>10s} {'worst':>7s} {'net mean':>9s} {'worst':>7s} "
          f"{'runs/prompt':>11s} {'cost ×off':>9s} {'bound ok':>8s} {'bound med':>9s} {'net bd ok':>9s}")
    for scenario in SCENARIOS:
        if args.only and args.only not in scenario.name:
            continue
        for meter in scenario.meters:
            if meter not in wanted:
                continue
            cells = [run_cell(make_energy_meter, scenario, meter, seed, args.prompts) for seed in range(args.seeds)]
            s = summarize(cells)
            table.append({"scenario": scenario.name, "note": scenario.note, "meter": meter, **s})
            holds = "   n/a" if not math.isfinite(s["bound_holds"]) else f"{100 * s['bound_holds']:5.0f} %"
            net_holds = "   n/a" if not math.isfinite(s["net_bound_holds"]) else f"{100 * s['net_bound_holds']:5.0f} %"
            print(f"{scenario.name:28s} {meter:8s} {pct(s['gross_mean']):>10s} {pct(s['gross_worst']):>7s} "
                  f"{pct(s['net_mean']):>9s} {pct(s['net_worst']):>7s} {s['runs_per_prompt']:11.1f} "
                  f"{s['cost_ratio']:9.2f} {holds:>8s} {pct(s['bound_median']):>9s} {net_holds:>9s}"
                  + (f"  ({s['nan']} NaN)" if s["nan"] else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
