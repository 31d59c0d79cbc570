"""Sampler overhead (issue 3; ``harness-gpu-check`` runs a shorter version of it): decoding tokens/s with the energy sampler thread polling at
50 Hz ÷ tokens/s without it, on the tiny pair, measured side by side in one run (goal ≥ 0.99).

Both arms go through an energy meter's ``measure`` (the "off" arm through a NullMeter, which
has no thread), in many short interleaved rounds (off, on, on, off, ...) so drifts in machine
load hit both; reported: the ratio of totals with a bootstrap 95 % interval over rounds, and
the median of the per-round ratios.
Without ``--nvml`` the sampler polls a simulated NVML in real time — the same thread, reads and
bookkeeping as on a GPU; with ``--nvml`` on a GPU machine it polls the real NVML of the GPUs the
models use. Tokens/s is the ratio of totals (tokens ÷ decoder wall time). The sampler's own CPU
cost per poll is reported too: on an oversubscribed CPU the slowdown is dominated by handing the
GIL back to the decoding thread, not by the polls themselves.

    python scripts/bench_sampler_overhead.py [--rounds 40] [--prompts 2] [--hz 50] [--nvml] [--out FILE]
    python scripts/bench_sampler_overhead.py --target <hub id or dir> --device cuda --nvml   # a real model on a GPU
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.methods import build_decoder  # noqa: E402
from harness.energy import NullMeter, make_energy_meter  # noqa: E402
from harness.energy.sampler import RealClock  # noqa: E402
from harness.energy.simulated import SimGPU, SimulatedNVML  # noqa: E402
from harness.models import load_pair  # noqa: E402
from harness.tasks import load_task  # noqa: E402

CONF = Path(__file__).resolve().parents[1] / "conf"


def sampler_meter(hz: float, pair, use_nvml: bool):
    """A meter whose only activity between windows is the sampler thread (no protocol, no idle baseline)."""
    cfg = {"protocol": False, "sample_hz": hz, "idle_baseline_s": 0.0, "infer_update_period_s": 0.0, "host": False}
    if use_nvml:
        return make_energy_meter(cfg, pair.cuda_devices())
    clock = RealClock()
    return make_energy_meter(cfg, [0], nvml=SimulatedNVML([SimGPU(clock)], clock), clock=clock)


def cpu_per_poll_s(hz: float, pair, use_nvml: bool, polls: int = 2000) -> float:
    """CPU time of one poll (all channels and devices), measured on this thread."""
    meter = sampler_meter(hz, pair, use_nvml)
    meter.sampler.stop()
    start = time.thread_time()
    for _ in range(polls):
        meter.sampler.poll()
    seconds = (time.thread_time() - start) / polls
    meter.close()
    return seconds


def run_arm(meter, decoder, prompts, max_new: int) -> tuple[int, float]:
    tokens, seconds = 0, 0.0
    for i, ids in enumerate(prompts):
        gens = meter.measure(f"prompt {i}", lambda: decoder.generate(ids, max_new, seed=i)).results
        tokens += sum(g.stats.new_tokens for g in gens)
        seconds += sum(g.stats.wall_time_s for g in gens)
    return tokens, seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--prompts", type=int, default=2, help="prompts per arm per round")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--hz", type=float, default=50.0)
    parser.add_argument("--method", default="ar_greedy")
    parser.add_argument("--target", default="tiny/target", help="target model (default: the embedded tiny pair)")
    parser.add_argument("--draft", default="tiny/draft", help="draft model, or 'none'")
    parser.add_argument("--dataset", default="kjv_heldout", help="prompt set: a conf/dataset/<name>.yaml")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--nvml", action="store_true", help="poll the real NVML (GPU machine)")
    parser.add_argument("--torch-threads", type=int, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)

    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    pair = load_pair(args.target, None if args.draft == "none" else args.draft, device=args.device)
    if args.nvml and not pair.cuda_devices():
        parser.error("--nvml needs the models on a GPU (--device cuda)")
    decoder = build_decoder(args.method, pair)
    task = load_task({**yaml.safe_load((CONF / "dataset" / f"{args.dataset}.yaml").read_text()),
                      "num_prompts": args.prompts})
    prompts = [task.prompt_ids(ex, pair.tokenizer) for ex in task.examples()]
    decoder.generate(prompts[0], 8)  # warm-up

    poll_cpu_s = cpu_per_poll_s(args.hz, pair, args.nvml)
    off_meter = NullMeter("sampler off")
    per_round = {"off": [], "on": []}  # (tokens, seconds) per round
    round_ratios, poll_rates = [], []
    for r in range(args.rounds):
        rates = {}
        for arm in (("off", "on") if r % 2 == 0 else ("on", "off")):
            opened = time.perf_counter()
            meter = sampler_meter(args.hz, pair, args.nvml) if arm == "on" else off_meter
            tokens, seconds = run_arm(meter, decoder, prompts, args.max_new_tokens)
            if arm == "on":
                poll_rates.append(meter.sampler.polls / (time.perf_counter() - opened))
                meter.close()
            per_round[arm].append((tokens, seconds))
            rates[arm] = tokens / seconds
        round_ratios.append(rates["on"] / rates["off"])
        print(f"round {r}: off {rates['off']:.1f} tok/s, on {rates['on']:.1f} tok/s, ratio {round_ratios[-1]:.4f}",
              flush=True)

    def ratio(rounds: list[int]) -> float:
        on_rate, off_rate = (sum(per_round[a][r][0] for r in rounds) / sum(per_round[a][r][1] for r in rounds)
                             for a in ("on", "off"))
        return on_rate / off_rate

    rng = random.Random(0)
    boot = sorted(ratio([rng.randrange(args.rounds) for _ in range(args.rounds)]) for _ in range(2000))
    off_rate, on_rate = (sum(t for t, _ in per_round[a]) / sum(s for _, s in per_round[a]) for a in ("off", "on"))
    result = {"method": args.method, "device": str(pair.device), "torch_threads": torch.get_num_threads(), "source": "nvml" if args.nvml else "simulated NVML",
              "sample_hz": args.hz, "achieved_poll_hz": statistics.median(poll_rates),
              "cpu_us_per_poll": 1e6 * poll_cpu_s, "sampler_cpu_share_of_one_core": poll_cpu_s * args.hz,
              "rounds": args.rounds,
              "prompts_per_arm": args.prompts, "tokens_per_s_off": off_rate, "tokens_per_s_on": on_rate,
              "ratio_on_off": on_rate / off_rate, "ratio_ci95": [boot[49], boot[1949]],
              "round_ratio_median": statistics.median(round_ratios),
              "round_ratio_min": min(round_ratios), "round_ratio_max": max(round_ratios), "goal": ">= 0.99"}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
