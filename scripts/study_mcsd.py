"""Study of improved multi-candidate speculative decoding (issue 12 item 6; mcsd §4, Tables 1-4, Fig. 8, App. A).

Part 1 — the tiny pair on ``mt_bench`` and ``alpaca``, under temperature 0.7 and 1.0 (plain temperature,
no top-k/top-p, as the seed and as the decision models were trained) and greedy. Arms, interleaved
prompt by prompt with the arm order rotating from prompt to prompt (so drifts in machine load spread
over every arm), same seed for every arm on a prompt, after one warm-up generation per arm:

* ``ar`` (the baseline: ar_sampling / ar_greedy), ``sd`` γ = 4, ``mcsd`` (4, 2, 2, 1) (§4.1);
* ``mcsd_target_init`` (n_t, 4, 3, 1, 1) for n_t = 1, 2, 3 (§4.1's (2, 4, 3, 1, 1); Table 1's n_t sweep;
  greedy: one arm, since r is one-hot and every tree has a single root whatever n_t);
* ``mcsd_dynamic`` W = 16, D = 5 (§4.1, App. A.1), decision model off, T1, T2 (β = 0.4, §3.3; Fig. 8),
  and T1 at β = 0.8 (a threshold where it does stop on this pair).

Per arm and (dataset, decoding): acceptance rate α = accepted_tokens ÷ draft_positions (the record
contract's ``acceptance_rate``; with a fixed γ it is the paper's α, "the longest accepted draft length ÷
the maximum draft length", pooled over rounds), the mean accepted length (Spec-Bench MAT), tokens per
target call, tokens/s ÷ AR and ÷ MCSD (ratio of totals, 95 % percentile bootstrap CI over prompts,
paired), target perplexity of the outputs and its shift against AR at the same temperature (paired
mean of per-prompt log-perplexity differences, with CI; Table 1's quality axis, since MT-Bench judging
is not possible offline), and for the decision-model arms the early-stop frequency (early stops ÷
rounds) and the mean γ.

Part 2 — the bias of target initialisation (§3.1) on toy pairs with an enumerable vocabulary: TV
distance between the decoder's empirical sequence distribution and the exact target distribution for
n_t = 1, 2, 3 (n_t = 1 is exact: its TV is the sampling-noise floor at that sample size), on a draft
close to the target and on unrelated drafts.

    python scripts/study_mcsd.py --prompts 20 --max-new-tokens 64 --tv-samples 10000 --out outputs/study_mcsd
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.analysis import stats  # noqa: E402
from harness.methods import build_decoder  # noqa: E402
from harness.metrics.perplexity import output_perplexity  # noqa: E402
from harness.models import load_pair  # noqa: E402
from harness.tasks import load_task  # noqa: E402

DECODINGS = {"T=0.7": dict(temperature=0.7, top_k=0, top_p=1.0), "T=1.0": dict(temperature=1.0, top_k=0, top_p=1.0),
             "greedy": dict(temperature=0.0, top_k=0, top_p=1.0)}
DATASETS = {"mt_bench": "mt_bench/question.jsonl", "alpaca": "alpaca/question.jsonl"}
AR, MCSD = "ar", "mcsd (4,2,2,1)"
DYN = "dynamic W=16 D=5"
#: Lossless arms whose samples are distinct draws from the target's distribution (the decision-model arms are left
#: out: where their model does not fire they repeat the DM-off arm's tokens, same seed).
POOL = (AR, "sd γ=4", MCSD, "target-init (1,4,3,1,1)", DYN)


def arms(decoding: str) -> dict[str, tuple[str, dict]]:
    """label → (method, parameters) for one decoding."""
    out = {AR: ("ar", {}), "sd γ=4": ("sd", {"gamma": 4}), MCSD: ("mcsd", {"k_config": (4, 2, 2, 1)})}
    for n_t in ((2,) if decoding == "greedy" else (1, 2, 3)):
        out[f"target-init ({n_t},4,3,1,1)"] = ("mcsd_target_init", {"k_config": (n_t, 4, 3, 1, 1)})
    dyn = {"num_drafts": 16, "gamma": 5}
    out[DYN] = ("mcsd_dynamic", dyn)
    out[f"{DYN} + T1"] = ("mcsd_dynamic", {**dyn, "decision_model": "t1"})
    out[f"{DYN} + T2"] = ("mcsd_dynamic", {**dyn, "decision_model": "t2"})
    out[f"{DYN} + T1 β=0.8"] = ("mcsd_dynamic", {**dyn, "decision_model": "t1", "decision_threshold": 0.8})
    return out


def run_part1(args, out: Path) -> pd.DataFrame:
    pair = load_pair("tiny/target", "tiny/draft", device="cpu")
    prompts = {}
    for name, path in DATASETS.items():
        task = load_task({"task": name, "name": name, "path": path, "num_prompts": args.first_prompt + args.prompts})
        prompts[name] = [task.prompt_ids(ex, pair.tokenizer) for ex in task.examples()]
    decoders = {(dec, label): build_decoder(method, pair, decoding={"name": dec, **DECODINGS[dec]}, **params)
                for dec in args.decodings for label, (method, params) in arms(dec).items()}
    warm = prompts[args.datasets[0]][0]
    for d in decoders.values():
        d.generate(warm, 8, seed=0)
    rows, started = [], time.time()
    for i in range(args.first_prompt, args.first_prompt + args.prompts):
        for name in args.datasets:
            if i >= len(prompts[name]):
                continue
            ids = prompts[name][i]
            for dec in args.decodings:
                labels = list(arms(dec))
                shift = i % len(labels)
                for label in labels[shift:] + labels[:shift]:  # rotating order
                    gen = decoders[(dec, label)].generate(ids, args.max_new_tokens, seed=1000 + i)
                    st = gen.stats
                    extras = st.extras_record()
                    rows.append({
                        "dataset": name, "decoding": dec, "arm": label, "prompt": i, "prompt_tokens": len(ids),
                        "new_tokens": st.new_tokens, "wall_time_s": st.wall_time_s, "target_calls": st.target_calls,
                        "draft_calls": st.draft_calls, "rounds": st.rounds, "draft_positions": st.draft_positions,
                        "draft_nodes": st.draft_nodes, "accepted_tokens": st.accepted_tokens,
                        "committed_tokens": sum(st.accept_lengths),
                        "early_stops": extras.get("stat.early_stops", math.nan),
                        "decision_checks": extras.get("stat.decision_checks", math.nan),
                        "other_root_wins": extras.get("stat.other_root_wins", math.nan),
                        "log_ppl": math.log(output_perplexity(pair.target, ids, gen.output_ids)),
                    })
        print(f"prompt {i + 1}/{args.first_prompt + args.prompts} done after {time.time() - started:.0f} s", flush=True)
        pd.DataFrame(rows).to_csv(out / "rows.csv", index=False)  # partial results survive an interruption
    return pd.DataFrame(rows)


def _paired(df: pd.DataFrame, arm: str, base: str) -> pd.DataFrame:
    a = df[df.arm == arm].set_index("key")
    b = df[df.arm == base].set_index("key")
    idx = a.index.intersection(b.index)
    return a.loc[idx], b.loc[idx]


def summarise(rows: pd.DataFrame, c: float = 0.1) -> pd.DataFrame:
    """Per (dataset | all, decoding, arm): the measured figures, and a modelled speed-up under a flat per-call cost
    (a memory-bound GPU: every forward costs the same whatever its tokens; draft call = ``c`` target calls)."""
    rows = rows.assign(key=rows.dataset + ":" + rows.prompt.astype(str),
                       model_time=rows.target_calls + c * rows.draft_calls)
    groups = list(rows.groupby(["dataset", "decoding"], sort=False))
    if rows.dataset.nunique() > 1:  # both datasets pooled (prompts paired within their dataset)
        groups += [(("all", dec), df) for dec, df in rows.groupby("decoding", sort=False)]
    out = []
    for (dataset, dec), df in groups:
        for arm in df.arm.unique():
            a = df[df.arm == arm]
            t = a.sum(numeric_only=True)
            rec = {"dataset": dataset, "decoding": dec, "arm": arm, "prompts": len(a),
                   "alpha": t.accepted_tokens / t.draft_positions if t.draft_positions else math.nan,
                   "mean_accept_length": t.committed_tokens / t.rounds if t.rounds else math.nan,
                   "tokens_per_target_call": t.new_tokens / t.target_calls,
                   "mean_gamma": t.draft_positions / t.rounds if t.rounds else math.nan,
                   "draft_nodes_per_round": t.draft_nodes / t.rounds if t.rounds else math.nan,
                   "tokens_per_s": t.new_tokens / t.wall_time_s,
                   "ppl": math.exp(a.log_ppl.mean()),
                   "early_stop_freq": t.early_stops / t.rounds if t.rounds and a.early_stops.notna().all() else math.nan,
                   "other_root_win_freq": (t.other_root_wins / t.rounds
                                           if t.rounds and a.other_root_wins.notna().all() else math.nan)}
            for base, key in ((AR, "vs_ar"), (MCSD, "vs_mcsd"), (DYN, "vs_dyn")):
                if base not in df.arm.values or arm in (base, AR):
                    continue
                x, y = _paired(df, arm, base)
                if key == "vs_dyn" and not arm.startswith(DYN):
                    continue
                est = stats.estimate((x.new_tokens, x.wall_time_s, y.new_tokens, y.wall_time_s), stats.ratio_of_totals)
                rec[f"speed_{key}"], rec[f"speed_{key}_lo"], rec[f"speed_{key}_hi"] = est
                est = stats.estimate((x.new_tokens, x.model_time, y.new_tokens, y.model_time), stats.ratio_of_totals)
                rec[f"model_{key}"], rec[f"model_{key}_lo"], rec[f"model_{key}_hi"] = est
                if key == "vs_ar":
                    d = stats.estimate((x.log_ppl.to_numpy() - y.log_ppl.to_numpy(),), stats.mean)
                    rec["log_ppl_shift_vs_ar"], rec["log_ppl_shift_vs_ar_lo"], rec["log_ppl_shift_vs_ar_hi"] = d
            # against the mean of the OTHER pool arms on the same prompt (all sample the target's distribution)
            pool = df[df.arm.isin(POOL) & (df.arm != arm)].groupby("key").log_ppl.mean()
            mine = a.set_index("key").log_ppl
            idx = mine.index.intersection(pool.index)
            d = stats.estimate(((mine.loc[idx] - pool.loc[idx]).to_numpy(),), stats.mean)
            rec["log_ppl_shift_vs_pool"], rec["log_ppl_shift_vs_pool_lo"], rec["log_ppl_shift_vs_pool_hi"] = d
            out.append(rec)
    return pd.DataFrame(out)


def run_part2(samples: int, length: int = 3) -> list[dict]:
    """TV(decoder's sequence distribution, exact target distribution) for n_t = 1, 2, 3 on toy pairs."""
    import copy

    from harness.models import ModelPair
    from harness.primitives.warping import Warp
    from harness.testing import ToyTokenizer, exact_sequence_distribution, toy_model, toy_pair, total_variation, \
        tv_bound

    def near(noise):
        target = toy_model(5, seed=0, hidden=24, layers=2)
        draft = copy.deepcopy(target)
        with torch.no_grad():
            draft.lm_head.weight.add_(noise * torch.randn(draft.lm_head.weight.shape,
                                                          generator=torch.Generator().manual_seed(5)))
        return ModelPair(target=target, draft=draft, tokenizer=ToyTokenizer(5), name=f"near{noise}")

    pairs = {"draft = target + noise 0.05 (close)": near(0.05), "draft = target + noise 0.5": near(0.5),
             "unrelated draft (toy_pair)": toy_pair(vocab_size=5)}
    warp, prompt = Warp(1.0), [1, 2, 3]
    out = []
    for name, pair in pairs.items():
        exact = exact_sequence_distribution(pair.target, prompt, length, warp)
        first: dict = {}
        for k, v in exact.items():
            first[k[:1]] = first.get(k[:1], 0.0) + v
        for n_t in (1, 2, 3):
            dec = build_decoder("mcsd_target_init", pair, k_config=(n_t, 2, 1), temperature=1.0, top_k=0, top_p=1.0)
            seqs, accepted, positions = [], 0, 0
            for s in range(samples):
                gen = dec.generate(prompt, length, seed=s)
                seqs.append(tuple(gen.output_ids))
                accepted += gen.stats.accepted_tokens
                positions += gen.stats.draft_positions
            expected_noise = 0.5 * sum(math.sqrt(p * (1 - p) / samples) for p in exact.values())
            out.append({"pair": name, "n_t": n_t, "samples": samples, "length": length,
                        "tv_sequences": total_variation(seqs, exact), "tv_first_token":
                            total_variation([x[:1] for x in seqs], first),
                        "noise_E_tv_sequences": expected_noise, "tv_bound_sequences": tv_bound(exact, samples),
                        "alpha": accepted / positions if positions else math.nan})
            print(json.dumps(out[-1]), flush=True)
    return out


def markdown(summary: pd.DataFrame, tv: list[dict]) -> str:
    def ci(r, key, fmt="{:.2f}"):
        v = r.get(key, math.nan)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "—"
        return f"{fmt.format(v)} [{fmt.format(r[key + '_lo'])}, {fmt.format(r[key + '_hi'])}]"

    lines = []
    for (dataset, dec), df in summary.groupby(["dataset", "decoding"], sort=False):
        lines += [f"\n### {dataset}, {dec} ({int(df.prompts.max())} prompts)\n",
                  "| arm | α | MAT | tok/target call | mean γ | tok/s | ÷ AR [95 % CI] | ÷ MCSD | ÷ dynamic (DM off) | "
                  "modelled ÷ AR | modelled ÷ MCSD | PPL | Δ log PPL vs AR | Δ log PPL vs lossless pool | early stops | "
                  "other-root wins |", "|" + "---|" * 16]
        for _, r in df.iterrows():
            r = r.to_dict()
            lines.append(f"| {r['arm']} | {r['alpha']:.3f} | {r['mean_accept_length']:.2f} | "
                         f"{r['tokens_per_target_call']:.2f} | {r['mean_gamma']:.2f} | {r['tokens_per_s']:.0f} | "
                         f"{ci(r, 'speed_vs_ar')} | {ci(r, 'speed_vs_mcsd')} | {ci(r, 'speed_vs_dyn')} | "
                         f"{ci(r, 'model_vs_ar')} | {ci(r, 'model_vs_mcsd')} | "
                         f"{r['ppl']:.2f} | {ci(r, 'log_ppl_shift_vs_ar', '{:+.3f}')} | "
                         f"{ci(r, 'log_ppl_shift_vs_pool', '{:+.3f}')} | "
                         f"{'—' if math.isnan(r['early_stop_freq']) else format(r['early_stop_freq'], '.3f')} | "
                         f"{'—' if math.isnan(r['other_root_win_freq']) else format(r['other_root_win_freq'], '.3f')} |")
    if tv:
        lines += ["\n### Bias of target initialisation (toy pairs, T = 1, sequences of 3 tokens)\n",
                  "| pair | n_t | α | TV sequences | TV first token | E[TV] of exact sampling |", "|---|---|---|---|---|---|"]
        for r in tv:
            lines.append(f"| {r['pair']} | {r['n_t']} | {r['alpha']:.3f} | {r['tv_sequences']:.4f} | "
                         f"{r['tv_first_token']:.4f} | {r['noise_E_tv_sequences']:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=20, help="prompts per dataset")
    ap.add_argument("--first-prompt", type=int, default=0, help="start at this prompt (to extend an earlier run)")
    ap.add_argument("--merge", default="", help="with --skip-part1: comma-separated rows.csv files to summarise "
                                                "together (default: OUT/rows.csv)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--datasets", default="mt_bench,alpaca")
    ap.add_argument("--decodings", default="T=0.7,T=1.0,greedy")
    ap.add_argument("--tv-samples", type=int, default=10000, help="samples per toy configuration (0: skip part 2)")
    ap.add_argument("--skip-part1", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--flat-cost-c", type=float, default=0.1,
                    help="draft ÷ target cost of one forward in the modelled (flat per-call cost) speed-up")
    ap.add_argument("--out", default=str(ROOT / "outputs" / "study_mcsd"))
    args = ap.parse_args(argv)
    args.datasets = [d for d in args.datasets.split(",") if d]
    args.decodings = [d for d in args.decodings.split(",") if d]
    for d in args.datasets:
        if d not in DATASETS:
            ap.error(f"--datasets: unknown '{d}'; valid: {', '.join(DATASETS)}")
    for d in args.decodings:
        if d not in DECODINGS:
            ap.error(f"--decodings: unknown '{d}'; valid: {', '.join(DECODINGS)}")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    summary = pd.DataFrame()
    if not args.skip_part1:
        rows = run_part1(args, out)
        summary = summarise(rows, args.flat_cost_c)
        summary.to_csv(out / "summary.csv", index=False)
    else:
        files = [Path(f) for f in args.merge.split(",") if f] or [out / "rows.csv"]
        if all(f.exists() for f in files):
            rows = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
            rows.to_csv(out / "rows_merged.csv", index=False)
            summary = summarise(rows, args.flat_cost_c)
            summary.to_csv(out / "summary.csv", index=False)
    tv = run_part2(args.tv_samples) if args.tv_samples else []
    if tv:
        (out / "tv.json").write_text(json.dumps(tv, indent=1))
    meta = {"prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
            "torch": torch.__version__, "elapsed_s": round(time.time() - started), "tv_samples": args.tv_samples}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    report = markdown(summary, tv) if not summary.empty else markdown(pd.DataFrame(columns=["dataset", "decoding"]), tv)
    (out / "report.md").write_text(report)
    print(report)
    print(json.dumps(meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
