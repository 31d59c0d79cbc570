"""``harness-gpu-check``: does this machine measure what runs will use? No downloads; ≤ 10 minutes;
writes ``gpu_check.json`` and ``gpu_check.md``. For every visible GPU (``--devices`` to choose):

1. **sensors** (:mod:`harness.energy.characterize`): each source's update period and refresh jitter,
   the counter's resolution and lag, the power reading's averaging window, the post-load idle
   (how long the GPU stays above its floor after work: ``energy.idle_settle_s`` should exceed it);
2. **a short cell through the real measurement path**: the embedded tiny pair generating on the
   device, each prompt measured by ``meter.measure`` exactly as the runner does — with the energy
   counter protocol, with polled power only, and with the papers' 1 Hz sum — compared with each
   other and with an external meter's log where one is given (``--external FILE``: CSV with a
   ``time`` column in Unix seconds and ``watts`` or cumulative ``joules``);
3. **sampler overhead**: tokens/s with the 50 Hz sampler ÷ without, interleaved rounds (a ratio
   whose interval spans 1 is reported as inconclusive, not as a result);
4. **cost curves** (:mod:`harness.tools.cost_curves`): verification-call cost against k, the draft ÷
   target cost c, AR decoding against the HBM roofline.

Every figure says whether it was measured, inferred (e.g. documented, or an upper bound) or not
measured, and why. On a machine without a GPU, steps 1-2 run against a simulated H100 in virtual
time (labelled simulated: they check this installation's code and measure no hardware).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import random
import sys
import time
from pathlib import Path
from functools import partial
from typing import Any, Callable

from harness.tools.checks import cell_comparison, render_markdown, sampler_overhead, simulated_device
from harness.tools.cost_curves import SEED_PAIRS, TINY_SYNTHETIC, cost_curves, synthetic_model

DEFAULT_KS = (1, 2, 4, 8, 16, 32, 64)


def matmul_load(device: int):
    """``busy(seconds)``: bf16 4096² matrix multiplies back to back on ``device`` for ``seconds``."""
    import torch

    a = torch.randn(4096, 4096, device=f"cuda:{device}", dtype=torch.bfloat16)
    b = torch.randn_like(a)

    def busy(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(4):
                a @ b
            torch.cuda.synchronize(device)

    return busy


def read_external(path: str | None) -> list[tuple[float, float, str]] | None:
    """An external meter's log: (Unix time, value, "watts" | "joules") rows, sorted."""
    if not path:
        return None
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    kind = "watts" if rows and "watts" in rows[0] else "joules"
    return sorted((float(r["time"]), float(r[kind]), kind) for r in rows)


def gpu_device(index: int, args, log) -> dict:
    """Steps 1-2 on CUDA device ``index``."""
    from harness.energy.characterize import characterize_sources
    from harness.energy.sampler import RealClock
    from harness.energy.sources import open_sources

    sources = open_sources([index], "auto")
    if not sources.channels():
        sources.close()
        return {"measured": False, "why": "; ".join(f"{k}: {v}" for k, v in sources.missing.items())}
    name = sources.devices[0].name if sources.devices else f"cuda:{index}"
    log(f"  GPU {index} ({name}): sensors")
    busy = matmul_load(index)
    extra = _power_draw(sources)
    try:
        figures = characterize_sources(sources, busy, RealClock(), quick=args.quick, extra=extra)
        profile = write_profile(sources, figures, sources.channels() + extra, args.out, log)
    finally:
        sources.close()
    log(f"  GPU {index}: a short cell through the measurement path (counter, polled, naive)")
    cell = cell_comparison(index, args, read_external(args.external), log)
    return {"name": name, "simulated": False, "figures": {k: f.as_dict() for k, f in figures.items()}, "cell": cell,
            "sensor_profile": profile}


def _power_draw(sources) -> list:
    """nvmlDeviceGetPowerUsage (= power.draw) beside the power reading a meter uses, to characterise it too."""
    from harness.energy.sources import NvmlPower, unsupported_reason

    if sources.nvml is None or not sources.devices or getattr(sources.power, "reading", None) == "usage":
        return []
    channel = NvmlPower(sources.nvml, sources.devices, "usage")
    return [channel] if unsupported_reason(sources.nvml, channel.read_one, channel.handles) is None else []


def write_profile(sources, figures, channels, out: str | None, log) -> dict:
    """The sensor profile of this device (every reading's measured update period, window and lag, with
    the device's uuid, the driver and the date), saved where later runs load it
    (:func:`harness.energy.profiles.profile_dir`) and beside gpu_check.json."""
    from harness.energy import profiles

    profile = profiles.profile_of(sources, figures, channels)
    path = profiles.save(profile)
    log(f"    sensor profile written to {path} (runs on this device and driver load it)")
    if out:
        profiles.save(profile, Path(out) / "sensor-profiles")
    return profile


def run_checks(args, log=print) -> dict:
    import torch

    from harness.models import load_pair

    cuda = torch.cuda.is_available()
    devices = ([int(d) for d in args.devices.split(",")] if args.devices else list(range(torch.cuda.device_count()))) \
        if cuda else []
    result = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "torch": torch.__version__,
              "device": ", ".join(torch.cuda.get_device_name(d) for d in devices) if cuda else "cpu",
              "quick": args.quick, "not_measured": {}, "gpus": {}}
    log(f"harness-gpu-check on {result['device']}")
    log("1-2. sensors and a short cell through the real measurement path, per GPU")
    for d in devices:
        result["gpus"][str(d)] = gpu_device(d, args, log)
    if not cuda:
        why = "no CUDA GPU: NVML power/energy cannot be measured on this machine"
        result["not_measured"]["sensors, the measured cell, external meter"] = why
        result["gpus"]["simulated H100"] = simulated_device(args, log)
        log(f"  not measured: {why}; the same steps ran against a simulated H100 in virtual time")
    log("3. sampler overhead (tiny pair)")
    pair = load_pair("tiny/target", "tiny/draft", device=f"cuda:{devices[0]}" if cuda else "cpu")
    result["sampler_overhead"] = sampler_overhead(pair, args.rounds, 3, args.max_new_tokens, cuda, log)
    if not cuda:
        result["not_measured"]["sampler overhead against NVML"] = "no GPU: the sampler polled a simulated NVML"
    log("4. cost curves")
    costs = _costs(args, pair, devices[0] if cuda else None, log)
    result["not_measured"].update(costs.pop("not_measured"))
    result.update(costs)
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    return result


def _costs(args, pair, device_index: int | None, log) -> dict:
    import torch

    from harness.tools.cost_curves import NOMINAL_BANDWIDTH_GBS, copy_bandwidth_gbs

    cuda = device_index is not None
    device = f"cuda:{device_index}" if cuda else "cpu"
    ks = [k for k in (range(1, args.max_k + 1) if cuda else DEFAULT_KS) if k <= args.max_k]
    # name -> () -> (target, draft, dtype name): the models are built when measured
    pairs: dict[str, Callable[[], tuple[Any, Any, str]]] = {
        "tiny (embedded)": lambda: (pair.target, pair.draft, "float32")}
    out: dict = {"not_measured": {}}
    if cuda:
        dtype_of = {"float16": torch.float16, "bfloat16": torch.bfloat16}

        def seed_pair(t: Any, d: Any, dt: str) -> tuple[Any, Any, str]:
            return synthetic_model(t, dtype_of[dt], device), synthetic_model(d, dtype_of[dt], device), dt

        for name, (t_spec, d_spec, dt) in SEED_PAIRS.items():
            if args.shapes == "all" or name in args.shapes.split(","):
                pairs[name] = partial(seed_pair, t_spec, d_spec, dt)
    else:
        pairs["tiny synthetic (random weights)"] = lambda: (synthetic_model(TINY_SYNTHETIC[0], torch.float32, "cpu"),
                                                            synthetic_model(TINY_SYNTHETIC[1], torch.float32, "cpu"),
                                                            "float32")
        out["not_measured"]["seed-shaped models (7B/8B/13B)"] = "GPU only: too large to time on a CPU"
        out["not_measured"]["HBM roofline"] = "GPU only"
    out["ks"] = ks
    out["cost_curves"] = cost_curves(pairs, ks, device, args.reps, log)
    entry = out["cost_curves"].get("llama2-7b/68m", {})
    if cuda and "ar_tokens_per_s" in entry:
        measured = copy_bandwidth_gbs(device)
        name = torch.cuda.get_device_name(device_index)
        nominal = next((v for k, v in NOMINAL_BANDWIDTH_GBS.items() if k in name), math.nan)
        out["roofline_7b"] = {
            "ar_tokens_per_s": entry["ar_tokens_per_s"], "weight_bytes": entry["weight_bytes"],
            "copy_bandwidth_gbs": measured, "nominal_bandwidth_gbs": nominal,
            "roofline_tokens_per_s_measured_bw": measured * 1e9 / entry["weight_bytes"],
            "roofline_tokens_per_s_nominal_bw": nominal * 1e9 / entry["weight_bytes"],
            "fraction_of_roofline": entry["ar_tokens_per_s"] / (measured * 1e9 / entry["weight_bytes"])}
    return out


def budget_s(quick: bool) -> float:
    """The stated budget (seconds): 10 minutes for the full check; --quick was measured at about
    2 minutes on a shared 2-core machine without a GPU (issue 30), so 5 minutes is its budget."""
    return 300.0 if quick else 600.0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="harness-gpu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="gpu_check", help="folder for gpu_check.json and gpu_check.md")
    parser.add_argument("--devices", default=None, help="CUDA device indices, comma-separated (default: every visible)")
    parser.add_argument("--external", default=None,
                        help="an external power meter's log (CSV: time in Unix seconds, and watts or joules)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts of the short measured cell")
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds of the sampler-overhead check")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-k", type=int, default=64, help="largest verification length k")
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions per forward call")
    parser.add_argument("--shapes", default="all", help="seed pairs to build on a GPU: all, or a comma list of "
                                                        + ", ".join(SEED_PAIRS))
    parser.add_argument("--quick", action="store_true", help="fewer steps, rounds and repetitions (smoke test; the "
                                                             "overhead ratio is then reported as inconclusive)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.reps, args.max_new_tokens, args.prompts = 2, 2, 8, min(args.prompts, 2)
        args.max_k = min(args.max_k, 8)
    random.seed(0)
    began = time.perf_counter()
    result = run_checks(args)
    result["elapsed_s"], result["budget_s"] = time.perf_counter() - began, budget_s(args.quick)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str))
    (out / "gpu_check.md").write_text(render_markdown(result))
    print(f"wrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
