"""What ``runner.breakdown`` costs (issue 13 item 6): tokens/s with the option on ÷ off, interleaved.

``breakdown`` synchronises the device before and after every forward call and at every draft/verify
boundary (``sync_timing``); the spans themselves are recorded either way. Each method decodes prompt i
with the option off and on (order alternating prompt by prompt), and the ratio of totals
on ÷ off has a 95 % bootstrap CI over prompts. On a CPU a sync is a no-op, so this measures the
bookkeeping only; on a GPU (``--device cuda``) it measures the syncs' cost.

    python scripts/bench_breakdown_cost.py [--methods sd,ar] [--prompts 16] [--max-new-tokens 48] [--device auto]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import yaml

HERE = Path(__file__).resolve().parent
try:
    import harness  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(HERE.parent))

from harness.analysis.stats import estimate, ratio_of_totals  # noqa: E402
from harness.methods import build_decoder  # noqa: E402
from harness.models import load_pair  # noqa: E402
from harness.tasks import load_task  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="sd,ar,specinfer")
    parser.add_argument("--decoding", default="greedy")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    pair = load_pair("tiny/target", "tiny/draft", device=args.device)
    conf = HERE.parent / "conf" / "dataset" / "kjv_heldout.yaml"
    task = load_task({**yaml.safe_load(conf.read_text()), "num_prompts": args.prompts})
    prompts = [task.prompt_ids(ex, pair.tokenizer) for ex in task.examples()]
    print(f"device {pair.device}, {len(prompts)} prompts, {args.max_new_tokens} new tokens, decoding {args.decoding}")
    print("| method | off tok/s | on tok/s | on ÷ off [95% CI] |\n|---|---|---|---|")
    for method in args.methods.split(","):
        arms = {flag: build_decoder(method, pair, decoding=args.decoding, sync_timing=flag) for flag in (False, True)}
        for dec in arms.values():
            dec.generate(prompts[0], 8, seed=0)
        rows = {flag: ([], []) for flag in arms}
        for i, ids in enumerate(prompts):
            for flag in ((False, True) if i % 2 else (True, False)):
                st = arms[flag].generate(ids, args.max_new_tokens, seed=i).stats
                rows[flag][0].append(st.new_tokens)
                rows[flag][1].append(st.wall_time_s)
        point, lo, hi = estimate((*rows[True], *rows[False]), ratio_of_totals)
        tps = {flag: sum(t) / sum(s) for flag, (t, s) in rows.items()}
        print(f"| {method} | {tps[False]:.1f} | {tps[True]:.1f} | {point:.3f} [{lo:.3f}, {hi:.3f}] |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
