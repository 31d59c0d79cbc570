"""GPU check of the energy subsystem (issue 3), for a machine with an NVIDIA GPU.

1. ``harness-power-probe``'s report: sources and fields, inferred update periods, idle power.
2. One bursty GPU workload of ≥ 10 s (matrix-multiply bursts of 5–60 ms with 0–20 ms gaps),
   measured at once by three windows: the NVML energy counter, the trapezoid integral of the
   power polled at 50 Hz (goal: within 5 % of the counter), and the seeds' 1 Hz sum.
3. With ``--protocol``: a 1.5 s bursty workload under the full protocol (4 trials of ≥ 5 s),
   counter vs polled energy per run.

Without a GPU it says so and exits 0.

    python scripts/gpu_energy_check.py [--seconds 12] [--device 0] [--protocol] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from harness.energy import make_energy_meter  # noqa: E402
from harness.energy.probe import probe, render  # noqa: E402

NAIVE = {"name": "naive", "source": "power-usage", "sample_hz": 1, "integration": "sum", "skip_unchanged": False,
         "align_timestamps": False, "protocol": False, "idle_baseline_s": 0.0, "infer_update_period_s": 0.0}


def bursty_workload(device: int, seconds: float, seed: int = 0):
    """A callable running matmul bursts of 5–60 ms separated by 0–20 ms idle gaps for ``seconds``."""
    a = torch.randn(4096, 4096, device=f"cuda:{device}", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    for _ in range(20):
        a @ b
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(50):
        a @ b
    torch.cuda.synchronize(device)
    per_matmul = (time.perf_counter() - start) / 50

    def run() -> float:
        rng = random.Random(seed)
        begin = time.perf_counter()
        while time.perf_counter() - begin < seconds:
            for _ in range(max(1, round(rng.uniform(0.005, 0.06) / per_matmul))):
                a @ b
            torch.cuda.synchronize(device)
            time.sleep(rng.uniform(0.0, 0.02))
        return time.perf_counter() - begin

    return run


def relative(x: float, reference: float) -> float:
    return (x - reference) / reference if math.isfinite(x) and math.isfinite(reference) and reference else math.nan


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="length of the bursty workload (≥ 10)")
    parser.add_argument("--device", type=int, default=0, help="CUDA device index")
    parser.add_argument("--protocol", action="store_true", help="also run the full protocol on a 1.5 s workload")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)

    report = probe(poll_seconds=1.0, idle_seconds=3.0)
    print(render(report))
    if not torch.cuda.is_available() or not report["gpus"]:
        print("No CUDA GPU available to PyTorch: nothing to check.")
        return 0

    result = {"probe": report, "device": torch.cuda.get_device_name(args.device)}
    window_cfg = {"protocol": False, "idle_baseline_s": 3.0, "infer_update_period_s": 1.0}
    with make_energy_meter(window_cfg, [args.device]) as meter, make_energy_meter(NAIVE, [args.device]) as naive:
        result["meter"] = meter.describe()
        run = bursty_workload(args.device, args.seconds)
        windows = (meter.start_window("bursty"), naive.start_window("bursty"))
        run()
        counter, seeds = meter.stop_window(windows[0]), naive.stop_window(windows[1])
    result["window"] = {
        "seconds": counter.duration_s, "source": counter.source, "counter_j": counter.energy_j,
        "polled_trapezoid_j": counter.polled_energy_j, "naive_1hz_sum_j": seeds.energy_j,
        "polled_vs_counter": relative(counter.polled_energy_j, counter.energy_j),
        "naive_vs_counter": relative(seeds.energy_j, counter.energy_j),
        "mean_power_w": counter.mean_power_w, "idle_power_w": counter.idle_power_w,
        "net_j": counter.net_energy_j, "counter_update_s": counter.update_period_s,
        "naive_coverage": seeds.coverage, "reason": counter.reason or seeds.reason, "goal": "|polled_vs_counter| <= 0.05",
    }
    if args.protocol:
        with make_energy_meter({"idle_baseline_s": 3.0}, [args.device]) as meter:
            _, reading = meter.measure("bursty 1.5 s", bursty_workload(args.device, 1.5, seed=1))
        result["protocol"] = {
            "runs": reading.repetitions, "trials": reading.trials, "counter_j_per_run": reading.energy_j,
            "polled_j_per_run": reading.polled_energy_j,
            "polled_vs_counter": relative(reading.polled_energy_j, reading.energy_j),
            "trial_spread": reading.trial_spread, "net_j_per_run": reading.net_energy_j, "reason": reading.reason}
    print(json.dumps({k: v for k, v in result.items() if k != "probe"}, indent=2, default=str))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
