"""Before/after speed of two checkouts of this project, interleaved: is a change a slowdown?

Runs ``scripts/bench_speculative.py`` of checkout A and of checkout B alternately (A B, B A, A B, …;
each in its own process with that checkout first on ``PYTHONPATH``), ``--reps`` times, and reports for
every setting × method the ratio B ÷ A of tokens/s: the geometric mean over the paired repetitions
with a 95 % percentile-bootstrap CI (resampling repetitions). Pairs of adjacent runs see the same
machine load, so the ratio cancels most of the drift.

    python scripts/bench_compare_trees.py --a /path/to/before --b . --reps 8 -- --prompts 4 --rounds 1
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path


def run_bench(tree: Path, bench_args: list[str], python: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        env = dict(os.environ, PYTHONPATH=str(tree))
        subprocess.run([python, str(tree / "scripts" / "bench_speculative.py"), *bench_args, "--out", str(out)],
                       cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        report = json.loads(out.read_text())
    return {(setting, name): row["tokens_per_s"] for setting, res in report["settings"].items()
            for name, row in res["methods"].items()}


def geo_mean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def bootstrap_ci(xs: list[float], n: int = 5000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    means = sorted(geo_mean([rng.choice(xs) for _ in xs]) for _ in range(n))
    return means[int(0.025 * n)], means[int(0.975 * n) - 1]


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--a", required=True, help="checkout A (before)")
    parser.add_argument("--b", required=True, help="checkout B (after)")
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--out", help="write every run's figures as JSON here")
    args = parser.parse_args(own)
    trees = {"A": Path(args.a).resolve(), "B": Path(args.b).resolve()}
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    for rep in range(args.reps):
        for label in ("A", "B") if rep % 2 == 0 else ("B", "A"):
            runs[label].append(run_bench(trees[label], bench_args, args.python))
            print(f"rep {rep + 1}/{args.reps} {label} done", file=sys.stderr, flush=True)
    print(f"B ÷ A tokens/s, {args.reps} interleaved repetitions; A = {trees['A']}, B = {trees['B']}; "
          f"bench args: {' '.join(bench_args) or '(defaults)'}")
    print("B/A: ratio of tokens/s; B/A vs AR: ratio of (method ÷ AR in the same run), which also cancels the "
          "load a whole process saw")
    print(f"{'setting':<10} {'method':<12} {'A tok/s':>8} {'B tok/s':>8} {'B/A':>7} {'95% CI':>15} "
          f"{'B/A vs AR':>10} {'95% CI':>15}")
    for key in runs["A"][0]:
        ratios = [b[key] / a[key] for a, b in zip(runs["A"], runs["B"])]
        ar = (key[0], "ar")
        normalised = [(b[key] / b[ar]) / (a[key] / a[ar]) for a, b in zip(runs["A"], runs["B"])]
        lo, hi = bootstrap_ci(ratios)
        nlo, nhi = bootstrap_ci(normalised)
        a_mean = sum(r[key] for r in runs["A"]) / args.reps
        b_mean = sum(r[key] for r in runs["B"]) / args.reps
        print(f"{key[0]:<10} {key[1]:<12} {a_mean:8.1f} {b_mean:8.1f} {geo_mean(ratios):7.3f} [{lo:.3f}, {hi:.3f}] "
              f"{geo_mean(normalised):10.3f} [{nlo:.3f}, {nhi:.3f}]")
    if args.out:
        Path(args.out).write_text(json.dumps({k: [{f"{s}/{m}": v for (s, m), v in r.items()} for r in rs]
                                              for k, rs in runs.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
