"""Our ``sd`` against HF assisted generation at the same γ, on real-shaped synthetic pairs (issue 14 item 5).

Both arms make the same model calls: ``hf_assisted`` is transformers' ``generate(assistant_model=...)``
pinned to γ draft tokens per round (constant schedule, no confidence early stop), ``sd`` is ours at
the same γ. For every dtype, every (decoding, γ, method) arm decodes prompt 1, then every arm prompt 2,
…, the arms' order rotating from prompt to prompt, so that load from other processes on a shared
machine hits every arm alike. The table gives tokens/s (ratio of totals) of each arm and
sd ÷ hf with a 95 % percentile bootstrap CI over prompts (prompts resampled jointly for both arms,
:mod:`harness.analysis.stats`), and the acceptance rate α of our arm.

Pairs: ``--pair`` is a synthetic shape of ``scripts/synthetic_pairs.py`` (random weights, acceptance set
by ``--mix``) or ``tiny`` (the embedded trained tiny pair, real prompts). ``--profile`` adds, per γ,
where a round of ours goes (draft, verification, the rest; from the generation statistics) and a
torch.profiler table of the top host operators for one generation.

    python scripts/bench_sd_vs_hf.py --pair llama2-7b/68m [--gammas 1-8] [--decodings greedy,sampling]
        [--dtypes float32,bfloat16] [--prompts 6] [--max-new-tokens 32] [--threads 1] [--out FILE]
    python scripts/bench_sd_vs_hf.py --compare before.json after.json

Runs on whichever ``harness`` package is first on the path (``PYTHONPATH=/path/to/checkout``), so the
same script times an older checkout for a before/after table.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
try:
    import harness  # noqa: F401 — the checkout on PYTHONPATH wins
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(HERE.parent))

from synthetic_pairs import SHAPES, random_prompts, synthetic_pair  # noqa: E402

from harness.analysis.stats import estimate, ratio_of_totals  # noqa: E402
from harness.methods import build_decoder  # noqa: E402

DEFAULT_MIX = {"qwen-0.5b/1.5b": 0.2, "llama2-7b/68m": 0.3, "tiny": 1.0}


def parse_gammas(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(g) for g in text.split(",")]


def load(pair_name: str, dtype: str, mix: float | None, n: int, prompt_len: int):
    """(pair, prompts)."""
    if pair_name == "tiny-trained":
        import yaml

        from harness.models import load_pair
        from harness.tasks import load_task

        pair = load_pair("tiny/target", "tiny/draft", device="cpu", dtype=dtype)
        conf = HERE.parent / "conf" / "dataset" / "kjv_heldout.yaml"
        task = load_task({**yaml.safe_load(conf.read_text()), "num_prompts": n})
        return pair, [task.prompt_ids(ex, pair.tokenizer) for ex in task.examples()]
    pair = synthetic_pair(pair_name, DEFAULT_MIX.get(pair_name) if mix is None else mix, dtype=dtype)
    return pair, random_prompts(pair.vocab_size, n, prompt_len)


def run_dtype(args, dtype: str) -> dict:
    pair, prompts = load(args.pair, dtype, args.mix, args.prompts, args.prompt_len)
    gammas = parse_gammas(args.gammas)
    arms = {}
    for decoding in args.decodings.split(","):
        for g in gammas:
            for method in ("sd", "hf_assisted"):
                arms[(decoding, g, method)] = build_decoder(method, pair, gamma=g, decoding=decoding)
    for dec in arms.values():  # warm-up (untimed)
        dec.generate(prompts[0], 8, seed=0)
    names = list(arms)
    rows = {k: {"tokens": [], "seconds": [], "accepted": [], "positions": [], "draft_s": [], "verify_s": [],
                "rounds": []} for k in names}
    start = time.perf_counter()
    for i, ids in enumerate(prompts):
        shift = (i * 7) % len(names)  # rotate the order prompt by prompt
        for key in names[shift:] + names[:shift]:
            st = arms[key].generate(ids, args.max_new_tokens, seed=1000 + i).stats
            r = rows[key]
            r["tokens"].append(st.new_tokens)
            r["seconds"].append(st.wall_time_s)
            r["accepted"].append(st.accepted_tokens)
            r["positions"].append(st.draft_positions)
            r["rounds"].append(st.rounds)
            r["draft_s"].append(st.draft_time_s)
            r["verify_s"].append(st.verify_time_s)
    elapsed = time.perf_counter() - start
    table = []
    for decoding in args.decodings.split(","):
        for g in gammas:
            ours, hf = rows[(decoding, g, "sd")], rows[(decoding, g, "hf_assisted")]
            point, lo, hi = estimate((ours["tokens"], ours["seconds"], hf["tokens"], hf["seconds"]), ratio_of_totals)
            wall, rounds = sum(ours["seconds"]), max(1, sum(ours["rounds"]))
            draft, verify = float(np.nansum(ours["draft_s"])), float(np.nansum(ours["verify_s"]))
            table.append({"decoding": decoding, "gamma": g,
                          "sd_tok_s": sum(ours["tokens"]) / wall, "hf_tok_s": sum(hf["tokens"]) / sum(hf["seconds"]),
                          "ratio": point, "ci_low": lo, "ci_high": hi,
                          "alpha": sum(ours["accepted"]) / max(1, sum(ours["positions"])),
                          "hf_alpha": sum(hf["accepted"]) / max(1, sum(hf["positions"])),
                          "ms_per_round": 1e3 * wall / rounds, "draft_ms": 1e3 * draft / rounds,
                          "verify_ms": 1e3 * verify / rounds, "rest_ms": 1e3 * (wall - draft - verify) / rounds})
    out = {"dtype": dtype, "prompts": len(prompts), "elapsed_s": elapsed, "table": table,
           "target_params": sum(p.numel() for p in pair.target.parameters()),
           "draft_params": sum(p.numel() for p in pair.draft.parameters())}
    if args.profile:
        out["profile"] = profile_one(arms, prompts[0], args.max_new_tokens, gammas)
    return out


def profile_one(arms, ids, max_new, gammas) -> dict:
    """torch.profiler's top host operators for one generation of each method at the largest γ."""
    from torch.profiler import ProfilerActivity, profile

    g = max(gammas)
    result = {}
    for method in ("sd", "hf_assisted"):
        key = next(k for k in arms if k[1] == g and k[2] == method)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            arms[key].generate(ids, max_new, seed=0)
        result[method] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    return result


def render(report: dict) -> str:
    lines = [f"pair {report['pair']} (mix {report['mix']}), {report['max_new_tokens']} new tokens, "
             f"threads {report['threads']}, torch {report['torch']}, transformers {report['transformers']}"]
    for run in report["runs"]:
        lines += ["", f"dtype {run['dtype']}: {run['prompts']} prompts, target {run['target_params'] / 1e6:.1f}M, "
                      f"draft {run['draft_params'] / 1e6:.1f}M params, {run['elapsed_s']:.0f} s",
                  "| decoding | γ | sd tok/s | hf tok/s | sd ÷ hf [95% CI] | α (sd / hf) "
                  "| ms/round: draft + verify + rest |",
                  "|---|---|---|---|---|---|---|"]
        for r in run["table"]:
            lines.append(f"| {r['decoding']} | {r['gamma']} | {r['sd_tok_s']:.1f} | {r['hf_tok_s']:.1f} | "
                         f"{r['ratio']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] | "
                         f"{r['alpha']:.2f} / {r['hf_alpha']:.2f} | {r['ms_per_round']:.1f}: "
                         f"{r['draft_ms']:.1f} + {r['verify_ms']:.1f} + {r['rest_ms']:.1f} |")
        for method, table in run.get("profile", {}).items():
            lines += ["", f"torch.profiler, {method}:", table]
    return "\n".join(lines)


def compare(before: dict, after: dict) -> str:
    """Side by side: sd ÷ hf [CI] of two reports (e.g. before and after a change) per dtype, decoding, γ."""
    lines = [f"pair {after['pair']}: sd ÷ hf before → after",
             "| dtype | decoding | γ | before [95% CI] | after [95% CI] |", "|---|---|---|---|---|"]
    old = {(run["dtype"], r["decoding"], r["gamma"]): r for run in before["runs"] for r in run["table"]}
    for run in after["runs"]:
        for r in run["table"]:
            b = old.get((run["dtype"], r["decoding"], r["gamma"]))
            fmt = lambda x: f"{x['ratio']:.3f} [{x['ci_low']:.3f}, {x['ci_high']:.3f}]" if x else "—"  # noqa: E731
            lines.append(f"| {run['dtype']} | {r['decoding']} | {r['gamma']} | {fmt(b)} | {fmt(r)} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pair", default="llama2-7b/68m", choices=[*SHAPES, "tiny-trained"])
    parser.add_argument("--mix", type=float, help="acceptance knob of the synthetic pairs (larger = lower α)")
    parser.add_argument("--gammas", default="1-8")
    parser.add_argument("--decodings", default="greedy,sampling")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--prompt-len", type=int, default=48)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--out", help="write the report as JSON here")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"),
                        help="print two saved reports (--out) side by side and exit")
    args = parser.parse_args(argv)
    if args.compare:
        print(compare(*(json.loads(Path(p).read_text()) for p in args.compare)))
        return 0
    torch.set_num_threads(args.threads)
    import transformers

    report = {"pair": args.pair, "mix": args.mix if args.mix is not None else DEFAULT_MIX.get(args.pair),
              "max_new_tokens": args.max_new_tokens, "threads": args.threads, "torch": torch.__version__,
              "transformers": transformers.__version__, "harness": str(Path(sys.modules["harness"].__file__).parent),
              "runs": [run_dtype(args, dtype) for dtype in args.dtypes.split(",")]}
    print(render(report))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
