"""The trained-head methods on the embedded tiny pair (issue 25 item 4): mean accepted length (MAT) of medusa and
eagle2 beside sd's, and tokens/s ÷ AR with a bootstrap CI.

Methods run interleaved, prompt by prompt, the order rotating per prompt (machine-load drifts hit every method);
the speed figure is the geometric mean over prompts of the per-prompt ratio tokens/s(method) ÷ tokens/s(AR), with
a 95 % percentile bootstrap CI over prompts (:func:`harness.analysis.stats.bootstrap_ci`). MAT is Spec-Bench's:
Σ tokens committed per round ÷ rounds, pooled; for the head methods the first round is the prefill (one token, no
drafts), so MAT without it is printed too; ``tokens/fwd`` = new tokens ÷ target forwards, the same for every method.
Greedy outputs are checked against AR's token by token.

    nice -n 10 python scripts/bench_heads.py [--prompts 16] [--max-new-tokens 64] [--decodings greedy,sampling]
                                             [--policies] [--threads 1] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.analysis.stats import bootstrap_ci, geometric_mean  # noqa: E402
from harness.methods import build_decoder  # noqa: E402
from harness.models import load_pair  # noqa: E402
from harness.tasks import load_task  # noqa: E402

#: label -> (method, parameters); the first of each decoding is the baseline. The smaller trees (Medusa's first 10
#: choices, EAGLE-2's 15 best nodes) suit a CPU, where verifying ~60 tree nodes costs several plain forwards.
#: With ``--policies``: adaptive Table 4 (SpecDec++ at two thresholds beside the online policy; the tiny head is
#: calibrated low, so h = 0.3 nearly always stops at gamma_min) and App. C.4 (EAGLE-2 with the online depth).
HEADS = {"medusa": ("medusa", {}), "medusa_n10": ("medusa", {"tree_nodes": 10}), "eagle2": ("eagle2", {}),
         "eagle2_n15": ("eagle2", {"total_tokens": 15})}
POLICIES = {"sd_online": ("sd", {"gamma_policy": "online"}),
            "sd_specdecpp_h0.3": ("sd", {"gamma_policy": {"name": "specdecpp", "threshold": 0.3}}),
            "sd_specdecpp_h0.9": ("sd", {"gamma_policy": {"name": "specdecpp", "threshold": 0.9}}),
            "eagle2_online": ("eagle2", {"gamma_policy": "online"})}
METHODS = {"greedy": {"ar_greedy": ("ar_greedy", {}), "sd": ("sd", {}), **HEADS},
           "sampling": {"ar_sampling": ("ar_sampling", {}), "sd": ("sd", {}), **HEADS,
                        "medusa_typical": ("medusa_typical", {})}}


def run(pair, prompts, decoding: str, max_new: int, methods: dict) -> dict[str, list[dict]]:
    """Every method on every prompt, interleaved with rotating order; one row per (method, prompt)."""
    decoders = {label: build_decoder(m, pair, decoding=decoding, **params) for label, (m, params) in methods.items()}
    for dec in decoders.values():  # warm-up (first-call allocations), not measured
        dec.generate(prompts[0], 8, seed=0)
    names = list(decoders)
    rows: dict[str, list[dict]] = {m: [] for m in names}
    for i, ids in enumerate(prompts):
        for m in names[i % len(names):] + names[: i % len(names)]:
            gen = decoders[m].generate(ids, max_new, seed=i)
            st = gen.stats
            rows[m].append({"tokens": gen.output_ids, "new": st.new_tokens, "wall": st.wall_time_s,
                            "rounds": st.rounds, "lengths": st.accept_lengths, "target_calls": st.target_calls,
                            "draft_calls": st.draft_calls, "gammas": st.round_gammas})
    return rows


def summarise(rows: dict[str, list[dict]], baseline: str) -> dict[str, dict]:
    base_tps = np.array([r["new"] / r["wall"] for r in rows[baseline]])
    out = {}
    for m, rs in rows.items():
        tps = np.array([r["new"] / r["wall"] for r in rs])
        ratio = tps / base_tps
        lo, hi = bootstrap_ci((ratio,), geometric_mean)
        lengths = [n for r in rs for n in r["lengths"]]
        drafted = [n for r in rs for n, g in zip(r["lengths"], r["gammas"]) if g > 0]
        out[m] = {"tokens_per_s": float(tps.mean()), "speedup_geomean": float(geometric_mean(ratio)),
                  "speedup_ci": [lo, hi], "mat": float(np.mean(lengths)) if lengths else float("nan"),
                  "mat_drafted_rounds": float(np.mean(drafted)) if drafted else float("nan"),
                  "tokens_per_target_forward": sum(r["new"] for r in rs) / sum(r["target_calls"] for r in rs),
                  "draft_calls_per_round": sum(r["draft_calls"] for r in rs) / max(1, sum(r["rounds"] for r in rs)),
                  "identical_to_baseline": sum(r["tokens"] == b["tokens"] for r, b in zip(rs, rows[baseline]))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--decodings", default="greedy,sampling")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--policies", action="store_true", help="add sd with online / SpecDec++ and eagle2 with online")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pair = load_pair("tiny/target", "tiny/draft", device="cpu")
    task = load_task({"task": "text_continuation", "name": "kjv_heldout", "num_prompts": args.prompts,
                      "prompt_words": 10})
    prompts = [pair.tokenizer(ex.prompt)["input_ids"] for ex in task.examples()]
    results = {}
    for decoding in args.decodings.split(","):
        methods = {**METHODS[decoding], **(POLICIES if args.policies else {})}
        rows = run(pair, prompts, decoding, args.max_new_tokens, methods)
        results[decoding] = summarise(rows, next(iter(METHODS[decoding])))
        print(f"\n{decoding}: {len(prompts)} prompts x {args.max_new_tokens} tokens, interleaved (tiny pair, CPU, "
              f"{args.threads} thread)")
        print(f"{'method':18} {'MAT':>6} {'MAT*':>6} {'tok/fwd':>8} {'draft/rnd':>9} {'tok/s':>8} "
              f"{'÷ AR (geomean, 95% CI)':>28} {'= AR':>5}")
        for m, s in results[decoding].items():
            lo, hi = s["speedup_ci"]
            print(f"{m:18} {s['mat']:6.2f} {s['mat_drafted_rounds']:6.2f} {s['tokens_per_target_forward']:8.2f} "
                  f"{s['draft_calls_per_round']:9.2f} {s['tokens_per_s']:8.1f} "
                  f"{s['speedup_geomean']:10.3f} [{lo:.3f}, {hi:.3f}] "
                  f"{s['identical_to_baseline'] if decoding == 'greedy' else '-':>5}")
        print("MAT*: drafted rounds only (the head methods' first round is the prefill)")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
