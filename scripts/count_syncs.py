"""Host-device synchronising calls and top-level aten ops per generated token and per round, for every registered
decoder and for HF ``generate`` / assisted generation, counted on a CPU (issue 28 item 2;
:mod:`harness.testing.host_sync`).

    PYTHONPATH=$PWD python scripts/count_syncs.py [--pair tiny|toy] [--tokens 48] [--prompts 2]
        [--methods ar,sd,...] [--json OUT]

Greedy where the method decodes greedily, else sampling. Counted over whole ``generate`` calls (the prompt's
upload and the output's read included).
"""
from __future__ import annotations

import argparse
import json

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.decoders import registry
from harness.methods import build_decoder
from harness.testing.heads import random_head_params
from harness.testing.host_sync import counting


class AtenOps(TorchDispatchMode):
    """Counts the aten operators dispatched (the ops a GPU would launch, before fusion) while active."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def load(pair_name: str, n: int):
    if pair_name == "toy":
        from harness.testing import near_pair

        return near_pair(vocab_size=16), [[1, 2, 3, 4, 5, 1, 2, 3]] * n
    from harness.models import load_pair
    from harness.tasks import load_task

    pair = load_pair("tiny/target", "tiny/draft", device="cpu")
    task = load_task({"task": "text_continuation", "name": "kjv_heldout", "num_prompts": n, "prompt_words": 10})
    return pair, [pair.tokenizer(ex.prompt)["input_ids"] for ex in task.examples()]


def measure(decoder, prompts, tokens: int) -> dict:
    decoder.generate(prompts[0], 4, seed=0)  # warm-up
    syncs, ops, new, rounds = None, 0, 0, 0
    by_name: dict[str, int] = {}
    for i, p in enumerate(prompts):
        ops_mode = AtenOps()
        with counting() as c, ops_mode:
            gen = decoder.generate(p, tokens, seed=i)
        for k, v in c.by_name.items():
            by_name[k] = by_name.get(k, 0) + v
        syncs = (syncs or 0) + c.total
        ops += ops_mode.n
        new += gen.stats.new_tokens
        rounds += gen.stats.rounds
    return {"syncs": syncs, "tokens": new, "rounds": rounds, "per_token": syncs / new,
            "per_round": syncs / rounds if rounds else None, "ops_per_token": ops / new, "by_name": by_name}


def hf_generate(pair, prompts, tokens: int, assisted_gamma: int | None) -> dict:
    """HF ``generate`` (greedy), or assisted generation at γ, counted the same way."""
    kw = {"do_sample": False, "max_new_tokens": tokens, "min_new_tokens": tokens,
          "pad_token_id": 0, "eos_token_id": None}
    if assisted_gamma is not None:
        pair.draft.generation_config.num_assistant_tokens = assisted_gamma
        pair.draft.generation_config.num_assistant_tokens_schedule = "constant"
        pair.draft.generation_config.assistant_confidence_threshold = 0.0
        kw["assistant_model"] = pair.draft
    syncs, ops, new = 0, 0, 0
    by_name: dict[str, int] = {}
    for p in prompts:
        ids = torch.tensor([p])
        ops_mode = AtenOps()
        with torch.inference_mode(), counting() as c, ops_mode:
            out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        for k, v in c.by_name.items():
            by_name[k] = by_name.get(k, 0) + v
        syncs += c.total
        ops += ops_mode.n
        new += out.size(1) - ids.size(1)
    return {"syncs": syncs, "tokens": new, "per_token": syncs / new, "ops_per_token": ops / new, "by_name": by_name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default="tiny", choices=("tiny", "toy"))
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--methods", default="")
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    pair, prompts = load(args.pair, args.prompts)
    rows = {}
    names = args.methods.split(",") if args.methods else sorted(registry())
    for name in names:
        cls = registry()[name]
        decoding = "greedy" if "greedy" in cls.decodings else "sampling"
        try:
            dec = build_decoder(name, pair, decoding=decoding, **random_head_params(name, pair))
        except Exception as exc:  # noqa: BLE001 — a method this pair cannot run is reported, not fatal
            rows[name] = {"error": f"{type(exc).__name__}: {exc}"[:120]}
            continue
        rows[name] = {"decoding": decoding, **measure(dec, prompts, args.tokens)}
    rows["HF generate"] = hf_generate(pair, prompts, args.tokens, None)
    rows["HF assisted g=4"] = hf_generate(pair, prompts, args.tokens, 4)
    print(f"{'method':18s} {'syncs/token':>11s} {'syncs/round':>11s} {'aten ops/token':>14s}  top calls")
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:18s} {r['error']}")
            continue
        top = ", ".join(f"{k} {v}" for k, v in sorted(r["by_name"].items(), key=lambda kv: -kv[1])[:4])
        per_round = f"{r['per_round']:.2f}" if r.get("per_round") else "-"
        print(f"{name:18s} {r['per_token']:11.2f} {per_round:>11s} {r['ops_per_token']:14.0f}  {top}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
