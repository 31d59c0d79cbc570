"""Per-round overhead of each γ policy: the time of next_gamma() + observe(), nothing else.

adaptive App. C.1 asks the RL agent to run "in under 1 millisecond" per step. Rounds are
simulated (each draft accepted with probability β, times from a_q and b_p(γ)); only the two
policy calls are timed, one round at a time, with perf_counter_ns. Prints the median and the
99th percentile per round in microseconds, over ``--rounds`` rounds in generations of 64.

    python scripts/bench_gamma_policies.py [--rounds 20000] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import random
import time

import numpy as np

from harness.adaptive.policies import POLICIES, make_gamma_policy
from harness.testing.policies import censored_geometric
from harness.primitives.round import Round

CONFIGS = {name: {} for name in POLICIES.all()}
CONFIGS.update({"online(mle)": {"acc_estimator": "mle"}, "qlearning(state_len=2)": {"state_len": 2},
                "qlearning(throughput)": {"reward": "throughput"}})


def bench(name: str, kwargs: dict, rounds: int, seed: int = 0) -> np.ndarray:
    policy = make_gamma_policy(name.split("(")[0], **kwargs)
    rng = random.Random(seed)
    ns = np.empty(rounds)
    prompt = [rng.randrange(4096) for _ in range(40)]
    for r in range(rounds):
        if r % 64 == 0:
            policy.reset(prompt)
        acc_draws = rng.random()
        t0 = time.perf_counter_ns()
        g = policy.next_gamma()
        t1 = time.perf_counter_ns()
        acc = censored_geometric(0.5 + 0.4 * acc_draws, g, rng)
        o = Round(tuple(rng.randrange(4096) for _ in range(acc + 1)), gamma=g, accepted=acc, draft_nodes=g,
                  draft_time_s=0.001 * g, verify_time_s=0.006 + 0.0005 * g)
        t2 = time.perf_counter_ns()
        policy.observe(o)
        t3 = time.perf_counter_ns()
        ns[r] = (t1 - t0) + (t3 - t2)
    return ns / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    out = {}
    print(f"{'policy':26s} {'median µs':>10s} {'p99 µs':>10s}")
    for name, kwargs in CONFIGS.items():
        us = bench(name, kwargs, args.rounds)
        out[name] = {"median_us": float(np.median(us)), "p99_us": float(np.percentile(us, 99)), "rounds": args.rounds}
        print(f"{name:26s} {out[name]['median_us']:10.1f} {out[name]['p99_us']:10.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
