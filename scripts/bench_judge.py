"""What the MT-Bench judge costs per answer (issue 25.3): generate N MT-Bench questions (both turns) with
``ar_greedy`` on the embedded tiny pair, grade them with a local HF judge (default: the embedded target,
which writes no usable verdicts — this measures the plumbing's and the model's cost, not a score), then
grade them again from the cache. Prints ms per judgment (mean, 95 % bootstrap CI over judgments, median),
the judge's answer length and ms per token written, the share of verdicts read, the process CPU time of
the judging (wall ÷ CPU shows how loaded the machine was), and the cache replay time.

    python scripts/bench_judge.py --questions 10 --max-tokens 2048 --threads 1
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from harness.judge.config import PRESETS
from harness.judge.results import JUDGE_SUMMARY, JUDGMENTS
from harness.resources import conf_dir
from harness.run.runner import run_cell


def _conf(group: str, name: str) -> dict:
    return yaml.safe_load((conf_dir() / group / f"{name}.yaml").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=10)
    ap.add_argument("--judge-model", default="tiny/target")
    ap.add_argument("--max-tokens", type=int, default=2048, help="judge.max_tokens (FastChat: 2048)")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="answer length (the dataset's default)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(tempfile.mkdtemp(prefix="bench_judge_"))
    judge = {**dataclasses.asdict(PRESETS["hf"]), "model": args.judge_model, "max_tokens": args.max_tokens,
             "device": args.device}
    cfg = {"method": {"name": "ar_greedy"}, "pair": {**_conf("pair", "tiny"), "device": args.device},
           "dataset": {**_conf("dataset", "mt_bench"), "num_prompts": args.questions}, "gpu": _conf("gpu", "cpu"),
           "energy": {"name": "off", "source": "none"}, "seed": 0, "max_new_tokens": args.max_new_tokens,
           "runner": {"warmup_generations": 0, "progress": False}}
    try:
        t0 = time.perf_counter()
        cell = run_cell(cfg, out)  # generation only
        t1, c1 = time.perf_counter(), time.process_time()
        run_cell({**cfg, "judge": judge}, out)  # the finished cell is skipped and judged
        t2, c2 = time.perf_counter(), time.process_time()
        (cell.cell_dir / JUDGE_SUMMARY).unlink()
        run_cell({**cfg, "judge": judge}, out)  # judged again from the cache alone
        t3 = time.perf_counter()
        lines = [json.loads(x) for x in (cell.cell_dir / JUDGMENTS).read_text().splitlines()]
        ms = np.array([x["judge.ms"] for x in lines], float)
        rng = np.random.default_rng(0)
        boots = [rng.choice(ms, len(ms)).mean() for _ in range(2000)]
        read = sum(x.get("metric.mt_bench_score") is not None for x in lines)
        from harness.models import load_tokenizer

        tok = load_tokenizer(args.judge_model)
        made = [len(tok(x.get("judge.text") or "", add_special_tokens=False)["input_ids"]) for x in lines]
        print(json.dumps({
            "judge": args.judge_model, "device": args.device, "threads": args.threads, "judgments": len(ms),
            "ms_per_judgment_mean": round(float(ms.mean()), 1),
            "ms_per_judgment_ci95": [round(float(np.percentile(boots, 2.5)), 1), round(float(np.percentile(boots, 97.5)), 1)],
            "ms_per_judgment_median": round(float(np.median(ms)), 1),
            "verdicts_read": f"{read}/{len(lines)}",
            "judge_tokens_written_mean": round(float(np.mean(made)), 1),
            "ms_per_written_token": round(float(ms.sum() / max(1, sum(made))), 2),
            "generation_s": round(t1 - t0, 1), "judging_s_incl_model_load": round(t2 - t1, 1),
            "judging_cpu_s": round(c2 - c1, 1),
            "cache_replay_s": round(t3 - t2, 2),
            "reasons": sorted({x.get("judge.reason") for x in lines if x.get("judge.reason")}),
        }, indent=1))
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
