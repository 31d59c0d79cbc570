"""DSBD and MTAD study on the tiny pair (issue 5): speed vs target-model perplexity, side by side in one run.

Part 1 (dsbd v1 §4.2, Figs. 4-6): DSBD over the paper's grid W_S ∈ {2..6}, t ∈ {0.7, 0.9}, γ ∈ {2, 3},
W_min ∈ {1, 2, 3}, against beam sampling (W = 1..4; W = 1 is multinomial sampling) and speculative
decoding, all with the dsbd paper's warping (top-k 10, top-p 0.8); Pareto fronts of tokens/s (higher is
better) against output perplexity (lower is better). Also DSBD's memory-constrained mode (§3.4, Table 1).
Part 2 (mtad Table 4): MTAD (γ = 4, 8 beams, τ ∈ {0.1, 0.9}) against SD (γ = 4), with BiLD, typical
acceptance and AR sampling as context and MTJD (K = 4) as the slow quality reference, all with seed
002's warping (top-k 20, top-p 0.9).

Every configuration decodes the same prompts with the same seeds, after one warm-up generation;
tokens/s = total new tokens ÷ total decoder wall time; perplexity = mean over prompts of the
output's perplexity under the target (mtad Eq. 1). Configurations run in rounds, in a shuffled
order per round, so drifts in machine load spread over all of them.

    python scripts/study_dsbd.py [--prompts 8] [--max-new-tokens 32] [--rounds 1] [--out outputs/study_dsbd]
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.decoders import registry  # noqa: E402
from harness.methods import build_decoder
from harness.metrics.perplexity import output_perplexity  # noqa: E402
from harness.models import load_pair  # noqa: E402
from harness.tasks import load_task  # noqa: E402

WARP_000 = dict(temperature=1.0, top_k=10, top_p=0.8)  # dsbd v1 §4.1
WARP_002 = dict(temperature=1.0, top_k=20, top_p=0.9)  # mtad App. F


def configurations(include_sd: bool) -> list[tuple[str, str, str, dict]]:
    """(part, label, method, params) for every configuration of the study."""
    confs = [("dsbd", f"beam_sampling W={w}", "beam_sampling", dict(width=w, **WARP_000)) for w in range(1, 5)]
    if include_sd:
        confs.append(("dsbd", "sd γ=4", "sd", dict(gamma=4, **WARP_000)))
    for ws, t, g, wmin in itertools.product(range(2, 7), (0.7, 0.9), (2, 3), (1, 2, 3)):
        confs.append(("dsbd", f"dsbd W_S={ws} t={t} γ={g} W_min={wmin}", "dsbd",
                      dict(draft_width=ws, threshold=t, gamma=g, min_width=wmin, **WARP_000)))
    for ws in range(2, 7):
        confs.append(("dsbd", f"dsbd-mem W_S={ws} t=0.9 γ=3 W_min=1", "dsbd",
                      dict(draft_width=ws, threshold=0.9, gamma=3, min_width=1, memory_constrained=True, **WARP_000)))
    confs.append(("mtad", "ar_sampling", "ar_sampling", dict(WARP_002)))
    if include_sd:
        confs.append(("mtad", "sd γ=4", "sd", dict(gamma=4, **WARP_002)))
    for tau in (0.1, 0.9):
        confs.append(("mtad", f"mtad γ=4 beams=8 τ={tau}", "mtad", dict(gamma=4, draft_width=8, tau=tau, **WARP_002)))
    confs.append(("mtad", "bild γ=10 τ1=0.9 τ2=2", "bild",
                  dict(gamma=10, fallback_threshold=0.9, rollback_threshold=2.0, **WARP_002)))
    confs.append(("mtad", "typical γ=4", "typical", dict(gamma=4, **WARP_002)))
    confs.append(("mtad", "mtjd γ=4 width=4 (beam search)", "mtjd", dict(gamma=4, width=4, temperature=0.0)))
    return confs


def pareto(points: list[dict]) -> set[str]:
    """Labels of the points no other point beats on both tokens/s (≥) and perplexity (≤)."""
    front = set()
    for a in points:
        dominated = any(b is not a and b["tokens_per_s"] >= a["tokens_per_s"] and b["ppl"] <= a["ppl"]
                        and (b["tokens_per_s"] > a["tokens_per_s"] or b["ppl"] < a["ppl"]) for b in points)
        if not dominated:
            front.add(a["label"])
    return front


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="passes over all configurations (shuffled order)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="outputs/study_dsbd")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    pair = load_pair(device=args.device)
    task = load_task({"task": "text_continuation", "name": "kjv_heldout", "num_prompts": args.prompts,
                      "prompt_words": 10})
    prompts = [pair.tokenizer(ex.prompt)["input_ids"] for ex in task.examples()]
    include_sd = "sd" in registry()
    confs = configurations(include_sd)
    decoders = {(part, label): build_decoder(method, pair, **params) for part, label, method, params in confs}
    acc = {key: {"tokens": 0, "seconds": 0.0, "ppl": [], "target_calls": 0, "accepted": 0, "rounds": 0, "extra": []}
           for key in decoders}
    for dec in decoders.values():
        dec.generate(prompts[0], 8, seed=0)  # warm-up
    rng = random.Random(0)
    start = time.time()
    for rnd in range(args.rounds):
        order = list(decoders)
        rng.shuffle(order)
        for key in order:
            for i, ids in enumerate(prompts):
                gen = decoders[key].generate(ids, args.max_new_tokens, seed=1000 * rnd + i)
                a = acc[key]
                a["tokens"] += gen.stats.new_tokens
                a["seconds"] += gen.stats.wall_time_s
                a["target_calls"] += gen.stats.target_calls
                a["accepted"] += gen.stats.accepted_tokens
                a["rounds"] += gen.stats.rounds
                a["ppl"].append(output_perplexity(pair.target, ids, gen.output_ids))
                a["extra"].append(gen.stats.extras_record())
        print(f"round {rnd + 1}/{args.rounds} done after {time.time() - start:.0f} s", flush=True)

    rows = []
    for part, label, method, params in confs:
        a = acc[(part, label)]
        ppls = [p for p in a["ppl"] if not math.isnan(p)]
        row = {"part": part, "label": label, "method": method, "params": params,
               "tokens_per_s": a["tokens"] / a["seconds"], "ppl": statistics.mean(ppls) if ppls else math.nan,
               "ppl_sem": statistics.stdev(ppls) / len(ppls) ** 0.5 if len(ppls) > 1 else math.nan,
               "tokens_per_target_call": a["tokens"] / max(a["target_calls"], 1)}
        if method == "dsbd":
            row["layers_accepted_per_iteration"] = a["accepted"] / a["rounds"] if a["rounds"] else math.nan
            for key in ("avg_width", "peak_kv_bytes"):
                vals = [e[f"stat.{key}"] for e in a["extra"] if not math.isnan(e.get(f"stat.{key}", math.nan))]
                row[key] = statistics.mean(vals) if vals else math.nan
        rows.append(row)
    for part in ("dsbd", "mtad"):
        pts = [r for r in rows if r["part"] == part]
        front = pareto([r for r in pts if r["method"] == "dsbd"]) if part == "dsbd" else set()
        beam_front = pareto([r for r in pts if r["method"] == "beam_sampling"]) if part == "dsbd" else set()
        overall = pareto(pts)
        for r in pts:
            r["dsbd_front"] = r["label"] in front
            r["beam_front"] = r["label"] in beam_front
            r["overall_front"] = r["label"] in overall

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
            "threads": args.threads, "device": args.device, "sd_available": include_sd,
            "torch": torch.__version__, "elapsed_s": time.time() - start}
    (out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(json.dumps(meta))
    for part in ("dsbd", "mtad"):
        warp = "top-k 10, top-p 0.8 (dsbd v1)" if part == "dsbd" else "top-k 20, top-p 0.9 (mtad)"
        print(f"\n## part {part} (warping: {warp})")
        print("| config | tok/s | PPL (± s.e.) | tok/target call | W̄ | layers acc./iter | front |")
        print("|---|---|---|---|---|---|---|")
        for r in sorted((r for r in rows if r["part"] == part), key=lambda r: -r["tokens_per_s"]):
            mark = "".join(s for s, k in (("D", "dsbd_front"), ("B", "beam_front"), ("*", "overall_front")) if r[k])
            print(f"| {r['label']} | {r['tokens_per_s']:.1f} | {r['ppl']:.2f} ± {r['ppl_sem']:.2f} | "
                  f"{r['tokens_per_target_call']:.2f} | "
                  f"{r.get('avg_width', float('nan')):.2f} | {r.get('layers_accepted_per_iteration', float('nan')):.2f}"
                  f" | {mark} |")
    if not include_sd:
        print("\nNOTE: method 'sd' is not registered; SD rows are missing.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
