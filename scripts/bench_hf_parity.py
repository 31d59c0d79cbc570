"""Eager parity with HF (issue 28 item 2): harness ``ar_greedy`` ÷ HF ``generate`` and ``sd`` ÷ HF assisted generation
at equal γ, same weights, greedy, interleaved prompt by prompt (the order rotating), tokens/s as ratios of totals with
95 % bootstrap CIs over prompts (:mod:`harness.analysis.stats`).

    PYTHONPATH=/path/to/checkout python scripts/bench_hf_parity.py [--prompts 12] [--max-new-tokens 48] [--gamma 4]
        [--repeats 2] [--device cpu|cuda] [--out FILE]

Both HF arms are timed the way the harness times its decoders (device synchronised before and after, one
``time.perf_counter`` span per generation). Runs on whichever ``harness`` is first on the path, so the same script
gives a before/after pair of checkouts; HF's arms are the same in both (the yardstick).
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from harness.analysis.stats import estimate, ratio_of_totals
from harness.methods import build_decoder
from harness.models import load_pair
from harness.primitives.forward import synchronize
from harness.tasks import load_task


class HFArm:
    """HF ``generate`` on the pair's target (greedy), with ``assistant_model`` when ``gamma`` is given."""

    def __init__(self, pair, gamma: int | None):
        self.pair, self.gamma = pair, gamma

    def generate(self, ids: list[int], max_new: int) -> tuple[int, float]:
        pair, kw = self.pair, {}
        if self.gamma is not None:
            cfg = pair.draft.generation_config
            cfg.num_assistant_tokens, cfg.num_assistant_tokens_schedule = self.gamma, "constant"
            cfg.assistant_confidence_threshold = 0.0
            kw["assistant_model"] = pair.draft
        x = torch.tensor([ids], device=pair.device)
        synchronize(pair.device)
        start = time.perf_counter()
        with torch.inference_mode():
            out = pair.target.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=max_new,
                                       min_new_tokens=max_new, pad_token_id=0, eos_token_id=None, **kw)
        synchronize(pair.device)
        return out.size(1) - x.size(1), time.perf_counter() - start


class OurArm:
    def __init__(self, decoder):
        self.decoder = decoder

    def generate(self, ids: list[int], max_new: int) -> tuple[int, float]:
        st = self.decoder.generate(ids, max_new, seed=0).stats
        return st.new_tokens, st.wall_time_s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2, help="passes over the prompts (each a paired sample)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    pair = load_pair("tiny/target", "tiny/draft", device=args.device)
    task = load_task({"task": "text_continuation", "name": "kjv_heldout", "num_prompts": args.prompts,
                      "prompt_words": 10})
    prompts = [pair.tokenizer(ex.prompt)["input_ids"] for ex in task.examples()]
    # the EOS never stops either side: both generate max_new tokens
    ar, sd = build_decoder("ar_greedy", pair), build_decoder("sd", pair, gamma=args.gamma, decoding="greedy")
    ar.eos_token_id = sd.eos_token_id = None
    arms = {"ar": OurArm(ar), "hf_generate": HFArm(pair, None), "sd": OurArm(sd), "hf_assisted": HFArm(pair, args.gamma)}
    for arm in arms.values():  # warm-up (untimed)
        arm.generate(prompts[0], 8)
    rows = {k: {"tokens": [], "seconds": []} for k in arms}
    names = list(arms)
    for r in range(args.repeats):
        for i, ids in enumerate(prompts):
            shift = (i + r) % len(names)
            for key in names[shift:] + names[:shift]:
                n, s = arms[key].generate(ids, args.max_new_tokens)
                rows[key]["tokens"].append(n)
                rows[key]["seconds"].append(s)
    out = {"device": args.device, "prompts": len(prompts), "repeats": args.repeats, "gamma": args.gamma,
           "max_new_tokens": args.max_new_tokens, "tok_s": {k: sum(v["tokens"]) / sum(v["seconds"])
                                                             for k, v in rows.items()}}
    for ours, theirs in (("ar", "hf_generate"), ("sd", "hf_assisted")):
        a, b = rows[ours], rows[theirs]
        point, lo, hi = estimate((a["tokens"], a["seconds"], b["tokens"], b["seconds"]), ratio_of_totals)
        out[f"{ours}/{theirs}"] = {"ratio": point, "ci_low": lo, "ci_high": hi}
        print(f"{ours} ÷ {theirs}: {point:.3f} [{lo:.3f}, {hi:.3f}]  ({out['tok_s'][ours]:.1f} vs "
              f"{out['tok_s'][theirs]:.1f} tok/s)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
