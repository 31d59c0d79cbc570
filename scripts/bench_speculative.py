"""Speculative decoding speed (issue 4), measured side by side in one run on the same pair and prompts.

For greedy (temperature 0) and sampling (temperature 1, top-k 20, top-p 0.9) settings:
tokens/s of each method ÷ AR (ar_greedy / ar_sampling), our ``sd`` ÷ HF assisted generation
(``hf_assisted`` pinned to the same γ, constant schedule, no confidence early stop; goal ≥ 1.10),
and SD's measured speed-up next to Leviathan et al.'s analytic improvement factor
IF = (1 − α^(γ+1)) / ((1 − α)(cγ + 1)) (mcsd Eq. 1), with α estimated from SD's rounds
(accepted ÷ (accepted + rejected rounds), the geometric MLE) and c = (draft forward time) ÷
(target forward time), both timed one token at a time with a KV cache at the prompts' context.

Methods run in interleaved rounds (every method on prompt i, then prompt i+1, …; the order
rotates per round) so machine-load drifts hit all of them. Tokens/s is the ratio of totals.

    python scripts/bench_speculative.py [--prompts 12] [--rounds 2] [--max-new-tokens 64] [--gamma 4]
                                        [--device cpu] [--threads 1] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import transformers
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.methods import build_decoder  # noqa: E402
from harness.models import load_pair  # noqa: E402
from harness.primitives.forward import CountedModel, synchronize  # noqa: E402
from harness.primitives.kv_cache import new_cache, truncate  # noqa: E402
from harness.stats import COUNT_FIELDS, ratios  # noqa: E402
from harness.tasks import load_task  # noqa: E402

CONF = Path(__file__).resolve().parents[1] / "conf"
SETTINGS = {"greedy": {"temperature": 0.0}, "sampling": {"temperature": 1.0, "top_k": 20, "top_p": 0.9}}


def method_specs(gamma: int, m: int, k_config: list[int]) -> dict[str, tuple[str, dict]]:
    return {"sd": ("sd", {"gamma": gamma}), "hf_assisted": ("hf_assisted", {"gamma": gamma}),
            "specinfer": ("specinfer", {"gamma": gamma, "num_drafts": m}),
            "spectr": ("spectr", {"gamma": gamma, "num_drafts": m}),
            "mcsd": ("mcsd", {"k_config": k_config})}


def analytic_improvement(alpha: float, gamma: int, c: float, verify_cost: float = 1.0) -> float:
    """Leviathan et al.'s expected improvement factor (mcsd §3, Eq. 1).

    ``verify_cost`` = (target forward of γ+1 tokens) ÷ (target forward of 1 token): 1 in the
    formula's model (verification as cheap as one step), measured > 1 on a CPU.
    """
    expected_tokens = gamma + 1 if alpha >= 1.0 else (1 - alpha ** (gamma + 1)) / (1 - alpha)
    return expected_tokens / (c * gamma + verify_cost)


@torch.inference_mode()
def forward_cost(pair, prompts, reps: int, tokens: int = 1) -> dict[str, float]:
    """Mean seconds of one cached forward of ``tokens`` new tokens, target and draft interleaved."""
    models = {"target": CountedModel(pair.target, pair.vocab_size), "draft": CountedModel(pair.draft, pair.vocab_size)}
    total = {name: 0.0 for name in models}
    count = 0
    for ids in prompts:
        prompt = torch.tensor([ids], device=pair.device)
        for name, model in models.items():
            cache = new_cache(model.model)
            model(prompt, cache, all_logits=False)
            step = prompt[:, -1:].repeat(1, tokens)
            for _ in range(2):  # warm-up
                model(step, cache)
                truncate(cache, prompt.size(1))
            synchronize(pair.device)
            start = time.perf_counter()
            for _ in range(reps):
                model(step, cache)
                truncate(cache, prompt.size(1))
            synchronize(pair.device)
            total[name] += time.perf_counter() - start
        count += reps
    return {name: t / count for name, t in total.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=4)
    parser.add_argument("--num-drafts", type=int, default=2, help="m for specinfer/spectr")
    parser.add_argument("--k-config", default="4,2,2,1", help="MCSD k-config")
    parser.add_argument("--settings", default="greedy,sampling")
    parser.add_argument("--methods", default="sd,hf_assisted,specinfer,spectr,mcsd")
    parser.add_argument("--target", default="tiny/target")
    parser.add_argument("--draft", default="tiny/draft")
    parser.add_argument("--dataset", default="kjv_heldout")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (the shared machine has 2 cores)")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    pair = load_pair(args.target, args.draft, device=args.device, dtype=args.dtype)
    task = load_task({**yaml.safe_load((CONF / "dataset" / f"{args.dataset}.yaml").read_text()),
                      "num_prompts": args.prompts})
    prompts = [task.prompt_ids(ex, pair.tokenizer) for ex in task.examples()]
    specs = method_specs(args.gamma, args.num_drafts, [int(k) for k in args.k_config.split(",")])
    methods = args.methods.split(",")
    report = {"device": str(pair.device), "dtype": args.dtype, "threads": args.threads,
              "torch": torch.__version__, "transformers": transformers.__version__,
              "pair": [args.target, args.draft], "prompts": len(prompts), "rounds": args.rounds,
              "max_new_tokens": args.max_new_tokens, "gamma": args.gamma, "settings": {}}

    cost = forward_cost(pair, prompts[:4], reps=20)
    verify_cost = forward_cost(pair, prompts[:4], reps=20, tokens=args.gamma + 1)
    c = cost["draft"] / cost["target"]
    report["forward_s"] = cost
    report["cost_ratio_c"] = c
    report["target_verify_over_single"] = verify_cost["target"] / cost["target"]

    for setting in args.settings.split(","):
        warp = SETTINGS[setting]
        arms = {"ar": build_decoder("ar_greedy" if setting == "greedy" else "ar_sampling", pair,
                                    **({} if setting == "greedy" else warp))}
        for name in methods:
            method, params = specs[name]
            arms[name] = build_decoder(method, pair, **params, **warp)
        for dec in arms.values():  # warm-up
            dec.generate(prompts[0], 16, seed=0)
        totals = {name: dict.fromkeys(COUNT_FIELDS + ("committed_tokens",), 0) for name in arms}
        names = list(arms)
        for r in range(args.rounds):
            for i, ids in enumerate(prompts):
                shift = (r * len(prompts) + i) % len(names)
                for name in names[shift:] + names[:shift]:
                    st = arms[name].generate(ids, args.max_new_tokens, seed=1000 * r + i).stats
                    for key, value in st.totals().items():
                        totals[name][key] += value
        ar_tps = ratios(totals["ar"])["tokens_per_s"]
        rows = {}
        for name, t in totals.items():
            row = {**ratios(t), "tokens": t["new_tokens"]}  # pooled over every prompt and round
            row["speedup_vs_ar"] = row["tokens_per_s"] / ar_tps
            if t["rounds"]:
                row["draft_calls_per_token"] = t["draft_calls"] / t["new_tokens"]
            rows[name] = row
        out = {"methods": rows}
        if "sd" in totals:
            sd = totals["sd"]
            alpha = sd["accepted_tokens"] / (sd["accepted_tokens"] + sd["rejected_rounds"])
            out["alpha"] = alpha
            out["analytic_improvement_factor"] = analytic_improvement(alpha, args.gamma, c)
            out["analytic_with_measured_verify_cost"] = analytic_improvement(
                alpha, args.gamma, c, report["target_verify_over_single"])
            out["measured_sd_speedup"] = rows["sd"]["speedup_vs_ar"]
            if "hf_assisted" in rows:
                out["sd_over_hf_assisted"] = rows["sd"]["tokens_per_s"] / rows["hf_assisted"]["tokens_per_s"]
        report["settings"][setting] = out

    print(f"device {report['device']} ({args.dtype}, {args.threads} thread(s)), torch {torch.__version__}, "
          f"transformers {transformers.__version__}; {len(prompts)} prompts x {args.rounds} rounds x "
          f"{args.max_new_tokens} new tokens; gamma={args.gamma}")
    print(f"forward (1 token, cached): target {cost['target'] * 1e3:.2f} ms, draft {cost['draft'] * 1e3:.2f} ms "
          f"-> c = {c:.3f}; target forward of gamma+1 tokens = {report['target_verify_over_single']:.2f} x one token")
    for setting, out in report["settings"].items():
        print(f"\n[{setting}]")
        print(f"{'method':<12} {'tok/s':>8} {'vs AR':>7} {'accept':>7} {'node acc':>8} {'mean AL':>8} {'tok/call':>8}")
        for name, row in out["methods"].items():
            print(f"{name:<12} {row['tokens_per_s']:8.1f} {row['speedup_vs_ar']:7.3f} {row['acceptance_rate']:7.3f} "
                  f"{row['node_acceptance_rate']:8.3f} {row['mean_acceptance_length']:8.2f} "
                  f"{row['block_efficiency']:8.2f}")
        if "alpha" in out:
            print(f"SD: alpha = {out['alpha']:.3f}, analytic IF = {out['analytic_improvement_factor']:.3f} "
                  f"(with the measured verify cost: {out['analytic_with_measured_verify_cost']:.3f}), "
                  f"measured SD / AR = {out['measured_sd_speedup']:.3f}")
        if "sd_over_hf_assisted" in out:
            print(f"SD / HF assisted = {out['sd_over_hf_assisted']:.3f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
