"""What a SIGKILL at a random point costs a cell now (issue 14 item 6's closing note).

Runs one cell (``sd``, tiny pair) in a child process, kills it at a uniformly random moment of its run,
and measures: prompts kept (written records survive), the generation work lost (time from the last
fsynced record to the kill = the prompt in flight), and the restart overhead of the rerun (process start,
loading, warm-up: time from the rerun's start to its first resumed record, minus one prompt's time).
The rerun is checked to write every prompt exactly once.

    PYTHONPATH=. python scripts/kill_cost.py --kills 5 --prompts 12
"""
from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from cellproc import CELL, env, partial_lines  # noqa: E402

from harness.results import store  # noqa: E402
from harness.run.runner import prepare_cell  # noqa: E402

CHILD = """
import json, sys, torch
torch.set_num_threads(1)
from harness.run.runner import run_cells
run_cells(json.loads(sys.argv[1]), sys.argv[2])
"""


def _start(cfg, results):
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps([cfg]), str(results)], env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    args = ap.parse_args(argv)
    cfg = json.loads(json.dumps(CELL))
    cfg.update(method={"name": "sd", "gamma": 4}, max_new_tokens=args.max_new_tokens,
               decoding={"name": "greedy", "temperature": 0.0, "top_k": 0, "top_p": 1.0})
    cfg["dataset"]["num_prompts"] = args.prompts
    rng = random.Random(0)
    tmp = Path(tempfile.mkdtemp(prefix="killcost_"))
    t0 = time.perf_counter()  # an uninterrupted run for the duration
    proc = _start(cfg, tmp / "full")
    proc.wait()
    full = time.perf_counter() - t0
    cell_dir = prepare_cell(cfg, tmp / "full")[2]
    per_prompt = sum(r["wall_time_s"] for r in store.read_records(cell_dir)) / args.prompts
    print(f"uninterrupted: {full:.1f} s for {args.prompts} prompts ({per_prompt:.3f} s generation per prompt)")
    rows = []
    for k in range(args.kills):
        results = tmp / f"k{k}"
        cell_dir = prepare_cell(cfg, results)[2]
        at = rng.uniform(0.0, full)
        proc = _start(cfg, results)
        time.sleep(at)
        proc.send_signal(signal.SIGKILL)
        t_kill = time.time()
        proc.wait()
        kept = partial_lines(cell_dir)
        partial = cell_dir / store.PARTIAL
        last_write = partial.stat().st_mtime if partial.exists() and kept else None
        lost_s = (t_kill - last_write) if last_write else float("nan")
        t1 = time.perf_counter()
        proc = _start(cfg, results)
        while partial_lines(cell_dir) <= kept and proc.poll() is None:
            time.sleep(0.005)
        first = time.perf_counter() - t1
        proc.wait()
        idx = [r["index"] for r in store.read_records(cell_dir)]
        assert idx == list(range(args.prompts)), idx
        rows.append({"kill_at_s": at, "prompts_kept": kept, "lost_generation_s": lost_s,
                     "restart_overhead_s": first - per_prompt})
        print(f"kill at {at:5.1f} s: {kept:2d} prompts kept; work lost since the last record "
              f"{lost_s:.2f} s; rerun's first new record after {first:.1f} s (restart overhead ≈ "
              f"{first - per_prompt:.1f} s); every prompt once: yes")
    import numpy as np

    lost = np.array([r["lost_generation_s"] for r in rows if r["lost_generation_s"] == r["lost_generation_s"]])
    over = np.array([r["restart_overhead_s"] for r in rows])
    print(f"\nlost generation work per kill: mean {lost.mean():.2f} s, max {lost.max():.2f} s "
          f"(one prompt = {per_prompt:.2f} s generation + scoring); restart overhead mean {over.mean():.1f} s; "
          f"before this change a kill lost every prompt of the cell so far (mean {full / 2:.0f} s of this cell)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
