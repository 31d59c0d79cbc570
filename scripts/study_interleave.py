"""Study: does the interleaved comparison mode tighten the paired ratios on a shared machine?

Runs the same comparison (``sd`` against ``ar_greedy``, greedy, tiny pair, held-out KJV prompts) in two
modes, alternated round by round so both meet the same load over the study (issue 10 item 4):

* **separate**: the two cells one after the other (how a plain ``harness -m`` sweep runs them);
* **interleaved**: one :func:`harness.run.runner.run_cells` comparison — prompt i by both methods (order
  rotating) before prompt i+1.

Per round and mode it reports the speed-up (ratio of totals) and the geometric mean of per-prompt ratios with
their 95 % bootstrap CIs over prompts (:func:`harness.analysis.paired.ratio_estimates`), and the s.d. of the
log per-prompt ratio. Across rounds: the mean CI width, mean s.d. of log ratios, and the s.d. of the
per-round speed-up (run-to-run spread). Every run is a fresh results folder (nothing skipped), in-process
(the pair loads once), one torch thread.

    PYTHONPATH=. python scripts/study_interleave.py --rounds 4 --prompts 16 --max-new-tokens 32
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from harness.results import store
from harness.analysis.paired import ratio_estimates
from harness.run.runner import run_cell, run_cells

CELL = {"seed": 0, "max_new_tokens": 32,
        "pair": {"name": "tiny", "target": "tiny/target", "draft": "tiny/draft", "dtype": "float32", "device": "cpu"},
        "dataset": {"name": "kjv_heldout", "task": "text_continuation", "path": "kjv_heldout/heldout.jsonl",
                    "num_prompts": 16, "max_new_tokens": 48, "stop": [], "prompt_words": 12},
        "gpu": {"name": "cpu"}, "runner": {"warmup_generations": 1, "warmup_new_tokens": 8, "progress": False}}
METHODS = [{"name": "ar_greedy"}, {"name": "sd", "gamma": 4}]


def _cfgs(args) -> list[dict]:
    out = []
    for m in METHODS:
        c = json.loads(json.dumps(CELL))
        c["method"] = m
        c["decoding"] = {"name": "greedy", "temperature": 0.0, "top_k": 0, "top_p": 1.0}
        c["dataset"]["num_prompts"] = args.prompts
        c["max_new_tokens"] = args.max_new_tokens
        out.append(c)
    return out


def _pairs(outcomes) -> dict:
    import pandas as pd

    recs = {o.cell_id: store.read_records(o.cell_dir) for o in outcomes}
    base, method = (recs[o.cell_id] for o in outcomes)
    p = pd.DataFrame({"key": [r["index"] for r in method], "new_tokens_m": [r["new_tokens"] for r in method],
                      "wall_time_s_m": [r["wall_time_s"] for r in method],
                      "new_tokens_b": [r["new_tokens"] for r in base], "wall_time_s_b": [r["wall_time_s"] for r in base],
                      "energy_j_m": math.nan, "energy_j_b": math.nan})
    est = ratio_estimates(p, n_resamples=2000)
    per = (p.new_tokens_m / p.wall_time_s_m) / (p.new_tokens_b / p.wall_time_s_b)
    est["sd_log_ratio"] = float(np.std(np.log(per), ddof=1))
    est["ci_width"] = est["speedup_hi"] - est["speedup_lo"]
    est["ci_width_geo"] = est["speedup_geo_hi"] - est["speedup_geo_lo"]
    return est


def run_mode(mode: str, cfgs: list[dict]) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"study_{mode}_"))
    try:
        t = time.perf_counter()
        if mode == "interleaved":
            outs = run_cells(cfgs, root)
        else:
            outs = [run_cell(c, root) for c in cfgs]
        assert all(o.status == "done" for o in outs), [(o.status, o.error) for o in outs]
        est = _pairs(outs)
        est["seconds"] = time.perf_counter() - t
        return est
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write the per-round rows as JSON here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfgs = _cfgs(args)
    rows = []
    for r in range(args.rounds):
        order = ["separate", "interleaved"] if r % 2 == 0 else ["interleaved", "separate"]
        for mode in order:
            est = run_mode(mode, cfgs)
            rows.append({"round": r, "mode": mode, **{k: est[k] for k in (
                "speedup", "speedup_lo", "speedup_hi", "ci_width", "speedup_geo", "speedup_geo_lo", "speedup_geo_hi",
                "ci_width_geo", "sd_log_ratio", "seconds")}})
            x = rows[-1]
            print(f"round {r} {mode:11s} speed-up {x['speedup']:.3f} [{x['speedup_lo']:.3f}, {x['speedup_hi']:.3f}] "
                  f"geo {x['speedup_geo']:.3f} [{x['speedup_geo_lo']:.3f}, {x['speedup_geo_hi']:.3f}] "
                  f"sd(log ratio) {x['sd_log_ratio']:.3f}  ({x['seconds']:.0f} s)", flush=True)
    print("\nmode         rounds  mean CI width (totals)  mean CI width (geo)  mean sd(log ratio)  "
          "speed-up across rounds: mean ± s.d.")
    for mode in ("separate", "interleaved"):
        g = [x for x in rows if x["mode"] == mode]
        sp = np.array([x["speedup"] for x in g])
        print(f"{mode:12s} {len(g):6d}  {np.mean([x['ci_width'] for x in g]):22.3f}  "
              f"{np.mean([x['ci_width_geo'] for x in g]):19.3f}  {np.mean([x['sd_log_ratio'] for x in g]):18.3f}  "
              f"{sp.mean():.3f} ± {sp.std(ddof=1) if len(sp) > 1 else float('nan'):.3f}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
