"""Mask preparation per iteration: dynamic sliced mask vs rebuilt mask (mcsd §3.2), a microbenchmark.

A dynamic MCSD loop drafts a tree whose depth changes every round (early stop), so each
target verification needs the topology-aware causal mask and position ids of a different
truncated tree over a growing prefix. Two ways to prepare them:

* rebuilt — ``tree_attention_mask`` + ``tree_position_ids`` of the round's tree (with the
  pending token as a one-token stem, as ``tree_forward`` feeds it), from its parent array;
* sliced — :class:`~harness.primitives.tree.SlicedTreeMask`, built once for the largest tree
  (D, W), then sliced per round (a view; no topology work). A third arm, "sliced+copy",
  also materialises the view (``.contiguous()``), the most a consumer could add.

Each shape replays a fixed random sequence of rounds (depth uniform in 1..D, prefix growing
by depth + 1 per round from 64 tokens). Arms run in interleaved repetitions with the order
rotating per repetition, so machine-load drifts hit all arms. Reported per shape: median
per-round time of each arm over repetitions, and the rebuilt ÷ sliced ratio — median of the
per-repetition ratios and ratio of totals, each with a 95 % bootstrap interval over repetitions.

Shapes (mcsd): fork W = 16, D = 5 (§4.1, App. A.1); W = 3, D = 3 (Fig. 2); the
target-initialised fork of §5 (2 sequences, D = 5); Fig. 6's widths 4..21 at D = 5; the
static k-configs (4,2,2,1) (§4.1 MCSD), (4,2,2,1,1) (Table 3) and (2,4,3,1,1) (§4.1) sliced by depth.

    python scripts/bench_tree_mask.py [--reps 40] [--rounds 100] [--device cpu|cuda] [--out FILE]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.primitives.tree_attention import SlicedTreeMask, fork_parents, level_order_parents  # noqa: E402
from harness.primitives.tree import (  # noqa: E402
                                     tree_attention_mask, tree_position_ids, with_stem)

SHAPES = {
    "fork W=16 D=5": fork_parents(16, 5),
    "fork W=3 D=3": fork_parents(3, 3),
    "fork W=2 D=5": fork_parents(2, 5),
    "fork W=4 D=5": fork_parents(4, 5),
    "fork W=8 D=5": fork_parents(8, 5),
    "fork W=12 D=5": fork_parents(12, 5),
    "fork W=21 D=5": fork_parents(21, 5),
    "k-config (4,2,2,1)": level_order_parents((4, 2, 2, 1)),
    "k-config (4,2,2,1,1)": level_order_parents((4, 2, 2, 1, 1)),
    "k-config (2,4,3,1,1)": level_order_parents((2, 4, 3, 1, 1)),
}


def make_rounds(max_depth: int, rounds: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    prefix, out = 64, []
    for _ in range(rounds):
        depth = rng.randint(1, max_depth)
        out.append((depth, prefix))
        prefix += depth + 1
    return out


def sync(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def run_arm(arm: str, plan, sliced: SlicedTreeMask, parents_by_depth, dtype, device) -> float:
    """Seconds per round of preparing mask + position ids for every round of ``plan``."""
    sync(device)
    start = time.perf_counter()
    if arm == "rebuilt":
        for depth, prefix in plan:
            full = with_stem(1, parents_by_depth[depth])
            tree_attention_mask(full, prefix, dtype, device)
            tree_position_ids(full, prefix, device)
    else:
        copy = arm == "sliced+copy"
        for depth, prefix in plan:
            mask = sliced.mask(depth, prefix, 1)
            if copy:
                mask.contiguous()
            sliced.position_ids(depth, prefix, 1)
    sync(device)
    return (time.perf_counter() - start) / len(plan)


def bootstrap(values_a, values_b, stat, reps=2000, seed=0) -> list[float]:
    rng = random.Random(seed)
    n = len(values_a)
    out = sorted(stat([values_a[i] for i in idx], [values_b[i] for i in idx])
                 for idx in ([rng.randrange(n) for _ in range(n)] for _ in range(reps)))
    return [out[int(0.025 * reps)], out[int(0.975 * reps) - 1]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=100, help="rounds replayed per repetition and arm")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--shapes", nargs="*", help=f"subset of: {', '.join(SHAPES)}")
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    arms = ("rebuilt", "sliced", "sliced+copy")
    results = {}
    for name in args.shapes or SHAPES:
        parents = SHAPES[name]
        t0 = time.perf_counter()
        sliced = SlicedTreeMask(parents, dtype=dtype, device=args.device, capacity=512)
        sliced.mask(sliced.max_depth, 0, 1)  # builds the stem buffer once
        build_s = time.perf_counter() - t0
        parents_by_depth = {d: sliced.parents_at(d) for d in range(1, sliced.max_depth + 1)}
        plan = make_rounds(sliced.max_depth, args.rounds, seed=len(results))
        for arm in arms:  # warm-up
            run_arm(arm, plan[:10], sliced, parents_by_depth, dtype, args.device)
        times = {a: [] for a in arms}
        for rep in range(args.reps):
            order = arms[rep % 3:] + arms[:rep % 3]
            for arm in order:
                times[arm].append(run_arm(arm, plan, sliced, parents_by_depth, dtype, args.device))
        reb, sl = times["rebuilt"], times["sliced"]
        ratios = [a / b for a, b in zip(reb, sl)]
        med_ratio = lambda a, b: statistics.median(x / y for x, y in zip(a, b))  # noqa: E731
        tot_ratio = lambda a, b: sum(a) / sum(b)  # noqa: E731
        results[name] = {
            "nodes_max": len(parents), "max_depth": sliced.max_depth,
            "median_us": {a: round(1e6 * statistics.median(times[a]), 2) for a in arms},
            "ratio_rebuilt_over_sliced": {
                "median_of_rep_ratios": round(statistics.median(ratios), 2),
                "median_ci95": [round(x, 2) for x in bootstrap(reb, sl, med_ratio)],
                "ratio_of_totals": round(tot_ratio(reb, sl), 2),
                "totals_ci95": [round(x, 2) for x in bootstrap(reb, sl, tot_ratio)]},
            "ratio_rebuilt_over_sliced_copy": round(statistics.median(a / b for a, b in zip(reb, times["sliced+copy"])), 2),
            "one_off_build_us": round(1e6 * build_s, 1),
        }
        r = results[name]
        print(f"{name:24s} N={len(parents):3d}  rebuilt {r['median_us']['rebuilt']:8.1f} µs  "
              f"sliced {r['median_us']['sliced']:6.1f} µs  sliced+copy {r['median_us']['sliced+copy']:6.1f} µs  "
              f"ratio {r['ratio_rebuilt_over_sliced']['median_of_rep_ratios']:.1f} "
              f"{r['ratio_rebuilt_over_sliced']['median_ci95']}  (one-off build {r['one_off_build_us']:.0f} µs)",
              flush=True)
    meta = {"device": args.device, "dtype": args.dtype, "torch": torch.__version__, "threads": torch.get_num_threads(),
            "reps": args.reps, "rounds_per_rep": args.rounds, "stem_len": 1,
            "per_round": "mask + position ids of one round's truncated tree"}
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"meta": meta, "shapes": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
