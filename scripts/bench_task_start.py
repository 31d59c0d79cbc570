"""How long `harness task INDEX` takes before its first cell starts: composing the whole sweep in every task
(`harness task INDEX OVERRIDES`) against reading the unit from a plan file written once (`harness task --plan
PLAN INDEX`; issue 24.7).

    python scripts/bench_task_start.py +experiment=dsbd_tables --index 0 --repeats 2

Writes the plan once (`harness plan --write`, timed too), then runs both forms `--repeats` times, alternating
which goes first, each in a fresh process; the first cell is not run (``run_cells`` is replaced by a stub that
notes the time and exits), so what is measured is process start, imports, composition or plan reading, and
the unit's validation — everything a task does before its first cell. HF_HUB_OFFLINE=1: hub pairs' tokenizers
are not fetched (validation then skips the prompt checks, in both forms alike).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import sys, time
import harness.run.plan as plan
def first_cell(unit, *args, **kwargs):
    print(f"FIRST_CELL {time.time():.6f} {len(unit)}", flush=True)
    sys.exit(0)
plan.run_cells = first_cell
sys.exit(plan.task_main(sys.argv[1:]))
"""


def _timed(argv: list[str], env: dict) -> float:
    start = time.time()
    r = subprocess.run([sys.executable, "-c", CHILD, *argv], capture_output=True, text=True, env=env)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("FIRST_CELL")), None)
    if line is None:
        raise SystemExit(f"no first cell ({r.returncode}): {r.stdout[-2000:]}{r.stderr[-2000:]}")
    return float(line.split()[1]) - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="+")
    ap.add_argument("--index", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    plan = Path(tempfile.mkdtemp()) / "plan.json"
    start = time.time()
    subprocess.run([sys.executable, "-m", "harness", "plan", "--count", "--write", str(plan), *args.overrides],
                   check=True, env=env, capture_output=True)
    print(f"harness plan --write: {time.time() - start:.1f} s (once per submission)")
    forms = {"compose (before)": [str(args.index), *args.overrides],
             "--plan (after)": ["--plan", str(plan), str(args.index)]}
    times: dict[str, list[float]] = {k: [] for k in forms}
    for rep in range(args.repeats):
        order = list(forms) if rep % 2 == 0 else list(forms)[::-1]
        for name in order:
            times[name].append(_timed(forms[name], env))
            print(f"  run {rep}: {name}: {times[name][-1]:.2f} s before the first cell", flush=True)
    for name, ts in times.items():
        print(f"{name}: " + ", ".join(f"{t:.2f}" for t in ts) + f" s (median {sorted(ts)[len(ts) // 2]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
