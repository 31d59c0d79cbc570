"""Train one more draft for the embedded tiny target (adaptive §5: drafts to select from).

The new draft shares the committed target's tokenizer and the same KJV training split as
``scripts/train_tiny_pair.py`` (whose corpus, batching, training loop and evaluation it reuses).
Its shape sits between the 2-layer draft and the 10-layer target in cost and agreement: the
2-layer draft's width with 4 layers.

``--init grow`` (default; what the committed ``draft4`` used, to fit ~45 min on 2 *shared* CPUs):
start from the committed 2-layer draft, grown function-preservingly to 4 layers (each layer
followed by a copy of itself whose output projections ``o_proj``/``down_proj`` are zero, so the
copy starts as the identity on the residual stream — zero-init residual growth, as in Net2Net's
identity growth), then train like the 2-layer draft was: cross-entropy on the data, then
distillation towards the committed target (CE mixed with KL(target || draft), weight 0.7).
``--init scratch`` trains the same shape from a random init (needs ~4× the steps: ``--steps-scale 4``).

Every stage ends with a float32 checkpoint in ``--work``; ``--start-stage k`` resumes from it.
At the end every draft in ``--out`` is measured against the target as shipped (float16 weights):
parameters, held-out perplexity, greedy top-1 agreement with the target, and the cost ratio c
(cached 1-token forward time ÷ the target's, models interleaved in rotating order, 1 thread).

    python scripts/train_extra_draft.py                          # ~30-45 min on 2 shared CPUs
    python scripts/train_extra_draft.py --steps-scale 0.01 --out /tmp/x --work /tmp/xw   # smoke
    python scripts/train_extra_draft.py --measure-only           # re-measure the committed drafts
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import train_tiny_pair as base  # noqa: E402  (the pair's corpus, split, loop and evaluation)

NAME = "draft4"
DRAFT4_SHAPE = dict(hidden_size=192, intermediate_size=512, num_hidden_layers=4,
                    num_attention_heads=6, num_key_value_heads=2)
# (steps, peak lr, batch-order seed offset, distil from the target?)
SCHEDULE = [
    (150, 1e-3, 11, False),
    (150, 1e-3, 12, True),
]


def grow_from(draft2, tokenizer, seed: int):
    """A 4-layer model computing exactly what ``draft2`` computes: layer i, then a copy of layer i
    with zeroed ``o_proj`` and ``down_proj`` (an identity block on the residual stream)."""
    import copy

    model = base.make_model(DRAFT4_SHAPE, draft2.config.vocab_size, tokenizer, seed)
    src = draft2.state_dict()
    dst = model.state_dict()
    per = DRAFT4_SHAPE["num_hidden_layers"] // draft2.config.num_hidden_layers
    for k, v in src.items():
        if ".layers." not in k:
            dst[k].copy_(v)
            continue
        i = int(k.split(".layers.")[1].split(".")[0])
        for j in range(per):
            kk = k.replace(f".layers.{i}.", f".layers.{i * per + j}.")
            zero = j > 0 and (k.endswith("o_proj.weight") or k.endswith("down_proj.weight"))
            dst[kk].copy_(torch.zeros_like(v) if zero else copy.deepcopy(v))
    model.load_state_dict(dst)
    return model


@torch.no_grad()
def interleaved_cost_ratios(target, drafts: dict, context=128, reps=300, seed=0):
    """c = median cached 1-token forward time of each draft ÷ the target's.

    Models are timed interleaved (one forward of each per repetition, order rotating) on the
    same thread count, so load drift hits all of them alike; a percentile bootstrap over
    repetitions gives a 95 % CI of each ratio of medians.
    """
    models = {"target": target, **drafts}
    names = list(models)
    ids = torch.randint(0, target.config.vocab_size, (1, context), generator=torch.Generator().manual_seed(seed))
    from harness.primitives.forward import with_cache
    from harness.primitives.kv_cache import new_cache

    caches = {n: new_cache(models[n]) for n in names}
    for n in names:
        models[n](ids, **with_cache(models[n], caches[n]))
    tok = ids[:, -1:]
    times = {n: [] for n in names}
    for r in range(reps):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            t = time.perf_counter()
            models[n](tok, **with_cache(models[n], caches[n]))
            times[n].append(time.perf_counter() - t)
            caches[n].crop(context - caches[n].get_seq_length())  # negative: tokens to remove
    arr = {n: np.array(v) for n, v in times.items()}
    rng = np.random.default_rng(seed)
    boot = rng.integers(0, reps, size=(1000, reps))
    out = {"target_forward_ms": float(np.median(arr["target"]) * 1e3), "reps": reps, "context": context,
           "threads": torch.get_num_threads()}
    for n in drafts:
        ratio = float(np.median(arr[n]) / np.median(arr["target"]))
        b = np.median(arr[n][boot], axis=1) / np.median(arr["target"][boot], axis=1)
        out[n] = {"forward_ms": float(np.median(arr[n]) * 1e3), "c": ratio,
                  "c_ci95": [float(np.percentile(b, 2.5)), float(np.percentile(b, 97.5))]}
    return out


def load(path: Path):
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def measure(out: Path, held_stream, names: list[str]) -> dict:
    """Each draft as shipped (float16 weights, run in float32) against the shipped target."""
    target = load(out / "target")
    drafts = {n: load(out / n) for n in names}
    report = {"target_params": sum(p.numel() for p in target.parameters()), "drafts": {}}
    for n, d in drafts.items():
        ev = base.evaluate(target, d, held_stream)
        report["target_ppl"] = ev["target_ppl"]
        report["drafts"][n] = {"params": sum(p.numel() for p in d.parameters()),
                               "layers": d.config.num_hidden_layers, "hidden_size": d.config.hidden_size,
                               "heldout_ppl": ev["draft_ppl"], "greedy_top1_agreement": ev["greedy_top1_agreement"],
                               "eval_tokens": ev["eval_tokens"]}
    torch.set_num_threads(1)
    cost = interleaved_cost_ratios(target, drafts)
    report["cost"] = cost
    for n in names:
        report["drafts"][n].update(c=cost[n]["c"], c_ci95=cost[n]["c_ci95"], forward_ms=cost[n]["forward_ms"])
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="harness/assets/tiny_pair", help="the pair directory (target/ and draft/ read, draft4/ written)")
    ap.add_argument("--work", default="/tmp/tiny_draft4_work", help="per-stage float32 checkpoints")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps-scale", type=float, default=1.0)
    ap.add_argument("--distill-weight", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start-stage", type=int, default=0, help="resume: load --work/stage<k-1> and run from stage k")
    ap.add_argument("--init", choices=["grow", "scratch"], default="grow")
    ap.add_argument("--measure-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out, work = Path(args.out), Path(args.work)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out / "target")
    chapters = base.load_kjv_chapters()
    train_texts = [base.chapter_text(c) for i, c in enumerate(chapters) if not base.is_heldout(i)]
    held_texts = [base.chapter_text(c) for i, c in enumerate(chapters) if base.is_heldout(i)]
    held_stream = base.encode_stream(tokenizer, held_texts)
    report_path = out / "drafts_report.json"

    if not args.measure_only:
        train_stream = base.encode_stream(tokenizer, train_texts)
        print(f"train tokens {len(train_stream)}, held-out tokens {len(held_stream)}", flush=True)
        target = load(out / "target")  # the teacher is the target as shipped
        for p in target.parameters():
            p.requires_grad_(False)
        spent = {"training_tokens": 0, "training_seconds": 0.0, "distillation_tokens": 0}
        if args.start_stage > 0:
            draft = load(work / f"stage{args.start_stage - 1}")
            spent = json.loads((work / f"stage{args.start_stage - 1}" / "spent.json").read_text())
        elif args.init == "grow":
            draft2 = load(out / "draft")
            draft = grow_from(draft2, tokenizer, args.seed + 2)
            x = held_stream[None, :256]
            with torch.no_grad():
                gap = (draft(x).logits - draft2(x).logits).abs().max().item()
            print(f"grown from the 2-layer draft; max |logit difference| before training {gap:.2e}", flush=True)
            spent["grown_from"] = "draft (2 layers), function-preserving"
        else:
            draft = base.make_model(DRAFT4_SHAPE, len(tokenizer), tokenizer, args.seed + 2)
        for index, (steps, lr, seed_offset, distil) in enumerate(SCHEDULE):
            if index < args.start_stage:
                continue
            steps = max(1, int(steps * args.steps_scale))
            tokens, seconds = base.train(draft, train_stream, steps, args.seq_len, args.batch, lr,
                                         args.seed + seed_offset, teacher=target if distil else None,
                                         distill_weight=args.distill_weight if distil else 0.0,
                                         name=f"{index}:{NAME}")
            spent["training_tokens"] += tokens
            spent["training_seconds"] = round(spent["training_seconds"] + seconds, 1)
            if distil:
                spent["distillation_tokens"] += tokens
            draft.eval()
            ck = work / f"stage{index}"
            draft.save_pretrained(ck, safe_serialization=True)
            (ck / "spent.json").write_text(json.dumps(spent))
        draft.generation_config.pad_token_id = tokenizer.pad_token_id
        draft.to(torch.float16).save_pretrained(out / NAME, safe_serialization=True)
        tokenizer.save_pretrained(out / NAME)
        shutil.copy(out / "target" / "tokenizer.json", out / NAME / "tokenizer.json")  # byte-identical
        training = {"shape": DRAFT4_SHAPE, "schedule": SCHEDULE, "args": vars(args), **spent,
                    "teacher": "the committed target (float16 weights run in float32)"}
    else:
        training = json.loads(report_path.read_text()).get("training", {}).get(NAME, {}) if report_path.exists() else {}

    names = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name.startswith("draft"))
    report = measure(out, held_stream, names)
    report["training"] = {NAME: training}
    report["how"] = ("held-out: the pair's held-out KJV chapters, 64 windows of 256 tokens (train_tiny_pair.evaluate); "
                     "c: median cached 1-token forward at context 128, models interleaved in rotating order, "
                     "1 thread, 95 % percentile-bootstrap CI over repetitions")
    print(json.dumps(report, indent=2), flush=True)
    report_path.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
