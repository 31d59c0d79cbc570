"""Train the early-stop decision models T1 and T2 of improved MCSD (mcsd §3.3, App. A.2) on the tiny pair.

Labels. From contexts cut out of TRAINING-split KJV text, the draft samples W = 16 fork-shaped
continuations of D = 5 tokens each (i.i.d. sequences from T∘q at the given temperature; §4.1's
dynamic configuration); the target scores them in one forward. For every draft token x_i:
q(x_i), p(x_i), the draft's last hidden state at x_i's position (T1's feature) and T∘q where
x_i is drawn (T2's; see ``harness/decoders/decision_model.py``), the acceptance probability
min(1, p(x_i)/q(x_i)) (T1's label; the seed prints max, the acceptance probability is min) and
one sampled accept/reject outcome (T2's label). Rows of a sequence are kept even after one of
its earlier tokens was rejected: each row is the question "would this token be accepted here".

Greedy (``--temperatures 0``): the fork's heads are the draft's top-W tokens, each continued by
its argmax (as ``mcsd_dynamic`` drafts under temperature 0); the labels are whether the draft token
equals the target's argmax (min(1, p/q) of one-hot distributions: 0 or 1); T2's features come from
the plain softmax of the draft's logits, since the one-hot T∘q carries none.

Data. ``scripts/train_tiny_pair.py`` holds out every 25th chapter (offset 7): those chapters
trained neither model and are the ``tasks/kjv_heldout`` prompt set; they are never read here.
The remaining (training-split) chapters are split again by chapter: every 10th (offset 3) is
the EVALUATION part (the held-out labels of the AUCs and early-stop figures below), every
10th (offset 6) the validation part (epoch selection), the rest fits the models. Contexts
are 8-96 tokens ending at a random token of a random chapter of a part.

Evaluation (held-out labels). AUC of each model's prediction against the sampled outcome,
with a 95 % bootstrap interval over contexts (rows of one context are correlated), next to
free baselines (the draft's own q(x_i); its top-1 probability) and the oracle that knows
min(1, p/q) (the best any predictor of the sampled outcome can do). Early stop: the draft
depth γ the rule (stop after d tokens when every sequence's next token is predicted below
β = 0.4, §3.3) reaches, per depth, for W = 1 (a chain), 2 (a target-initialised fork, §5)
and 16 (§4.1); for W = 1 also how often it stops before a token the target would have
accepted (premature stop, Fig. 7 / §5's explanation).

    python scripts/train_decision_models.py                                  # T = 1.0 and 0.7, ~8 min on 1 CPU
    python scripts/train_decision_models.py --temperatures 0                 # greedy (argmax-match labels)
    python scripts/train_decision_models.py --temperatures 1.0 --fit-contexts 200 --out /tmp/dm   # smoke
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from harness.models import load_pair  # noqa: E402
from harness.decoders.decision_model import (DEFAULT_THRESHOLD, DEFAULT_TOP_K, DecisionModel, roc_auc,  # noqa: E402
                                               stop_depth, topk_entropy_features)
from harness.primitives.forward import with_cache  # noqa: E402
from harness.primitives.kv_cache import new_cache  # noqa: E402
from harness.primitives.sampling import make_generator, sample  # noqa: E402
from harness.primitives.warping import Warp  # noqa: E402
from train_tiny_pair import chapter_text, is_heldout, load_kjv_chapters  # noqa: E402

PARTS = {"fit": None, "val": 6, "eval": 3}  # training-split chapter index % 10 → part (None: the rest)


def split_training_chapters(tokenizer) -> dict[str, list[list[int]]]:
    """Token ids (BOS first) of the training-split chapters, by part; the held-out chapters are dropped."""
    train = [c for i, c in enumerate(load_kjv_chapters()) if not is_heldout(i)]
    parts: dict[str, list[list[int]]] = {k: [] for k in PARTS}
    for j, ch in enumerate(train):
        ids = [tokenizer.bos_token_id] + tokenizer(chapter_text(ch), add_special_tokens=False)["input_ids"]
        part = next((k for k, r in PARTS.items() if r == j % 10), "fit")
        parts[part].append(ids)
    return parts


def sample_contexts(chapters: list[list[int]], n: int, rng: random.Random, min_len=8, max_len=96) -> list[list[int]]:
    out = []
    while len(out) < n:
        ids = chapters[rng.randrange(len(chapters))]
        if len(ids) < min_len + 1:
            continue
        end = rng.randrange(min_len, len(ids))
        out.append(ids[max(0, end - rng.randint(min_len, max_len)):end])
    return out


@torch.inference_mode()
def collect(pair, contexts: list[list[int]], width: int, depth: int, warp: Warp, top_k: int, generator) -> dict:
    """Fork-shaped draft continuations and their labels: tensors (C, W, D, ...) per context."""
    draft, target, vocab = pair.draft, pair.target, pair.vocab_size
    rows: dict[str, list[torch.Tensor]] = {k: [] for k in ("hidden", "t2", "q_x", "q_top1", "p_x", "accept_prob",
                                                           "accepted")}
    for ids in contexts:
        ctx = torch.tensor([ids])
        cache = new_cache(draft)
        h = draft.model(input_ids=ctx, **with_cache(draft.model, cache)).last_hidden_state[:, -1]
        cache.batch_repeat_interleave(width)
        h = h.expand(width, -1)
        hid, feats, qx, qtop, toks = [], [], [], [], []
        for j in range(depth):
            logits = draft.lm_head(h)[:, :vocab].float()
            if warp.is_greedy:  # the greedy fork: the draft's top-W heads, each continued by its argmax
                x = torch.topk(logits[:1], width, dim=-1).indices.T if j == 0 else logits.argmax(-1, keepdim=True)
                q = torch.softmax(logits, -1)  # features and baselines (the one-hot T∘q has none)
            else:
                q = warp.probs(logits)
                x = sample(q, generator)  # (W, 1)
            feats.append(topk_entropy_features(q, top_k))  # T2: the distribution x is drawn from
            qx.append(q.gather(1, x)[:, 0])
            qtop.append(q.max(-1).values)
            toks.append(x)
            # T1: the hidden state at x's own position (the last one costs a forward a decoder never needs)
            h = draft.model(input_ids=x, **with_cache(draft.model, cache)).last_hidden_state[:, -1]
            hid.append(h.half())
        xs = torch.cat(toks, dim=1)  # (W, D)
        tcache = new_cache(target)
        p_first = target(input_ids=ctx, **with_cache(target, tcache), logits_to_keep=1).logits[:, -1]
        tcache.batch_repeat_interleave(width)
        p_rest = target(input_ids=xs[:, :-1], **with_cache(target, tcache)).logits
        p = warp.probs(torch.cat([p_first.expand(width, 1, -1), p_rest], dim=1)[..., :vocab].float())
        px = p.gather(2, xs[..., None])[..., 0]
        q_x = torch.stack(qx, 1)
        ratio = px if warp.is_greedy else torch.clamp(px / q_x, max=1.0)  # greedy: 1 iff x is the target's argmax
        u = torch.rand(ratio.shape, generator=generator)
        rows["hidden"].append(torch.stack(hid, 1))
        rows["t2"].append(torch.stack(feats, 1))
        rows["q_x"].append(q_x)
        rows["q_top1"].append(torch.stack(qtop, 1))
        rows["p_x"].append(px)
        rows["accept_prob"].append(ratio)
        rows["accepted"].append(u < ratio)
    return {k: torch.stack(v) for k, v in rows.items()}


def features_of(data: dict, kind: str) -> torch.Tensor:
    return data["hidden"].float() if kind == "t1" else data["t2"]


def train_model(model: DecisionModel, fit: dict, val: dict, target_key: str, epochs: int, lr: float, batch: int,
                seed: int) -> dict:
    """Minimise BCE toward ``target_key`` (soft min(1, p/q) for T1, 0/1 outcome for T2); keep the epoch
    with the lowest validation BCE."""
    x = features_of(fit, model.kind).reshape(-1, model.in_features)
    y = fit[target_key].float().reshape(-1)
    xv = features_of(val, model.kind).reshape(-1, model.in_features)
    yv = val[target_key].float().reshape(-1)
    model.set_standardisation(x)
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    history, best_epoch = fit_epochs(model, torch.nn.BCEWithLogitsLoss(), (x, y, xv, yv), opt, epochs, batch)
    return {"epochs": epochs, "best_epoch": best_epoch, "val_bce": history, "fit_rows": int(x.size(0)),
            "val_rows": int(xv.size(0)), "lr": lr, "batch": batch, "loss": f"BCE toward {target_key}"}


def fit_epochs(model, loss_fn, data: tuple, opt, epochs: int, batch: int) -> tuple[list[float], int]:
    """Mini-batch epochs over ``data`` = (x, y, x_val, y_val) in a fresh random order each (torch's global
    generator); the model ends with the weights of the epoch of lowest validation loss. Returns the
    validation losses and that epoch (also used by ``scripts/train_specdecpp_head.py``)."""
    x, y, xv, yv = data
    best = (float("inf"), None, -1)
    history = []
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(x.size(0))
        for i in range(0, x.size(0), batch):
            idx = perm[i:i + batch]
            loss = loss_fn(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            val_loss = float(loss_fn(model(xv), yv))
        history.append(round(val_loss, 5))
        if val_loss < best[0]:
            best = (val_loss, {k: v.clone() for k, v in model.state_dict().items()}, epoch)
    model.load_state_dict(best[1])
    return history, best[2]


def bootstrap_auc(scores: torch.Tensor, labels: torch.Tensor, reps: int, seed: int) -> list[float]:
    """95 % percentile interval of the AUC, resampling contexts (dim 0)."""
    g = torch.Generator().manual_seed(seed)
    n = scores.size(0)
    vals = sorted(roc_auc(scores[idx], labels[idx]) for idx in (torch.randint(n, (n,), generator=g)
                                                                for _ in range(reps)))
    return [round(vals[int(0.025 * reps)], 4), round(vals[int(0.975 * reps) - 1], 4)]


def rule_figures(pred: torch.Tensor, accepted: torch.Tensor, threshold: float, lookahead: int, width: int,
                 histogram: bool = False) -> dict:
    """Where the rule stops on held-out contexts, for the first ``width`` of the W sequences."""
    depth = pred.size(-1)
    gamma = stop_depth(pred[:, :width], threshold, lookahead)
    entry = {"mean_gamma": round(float(gamma.float().mean()), 3),
             "early_stop_fraction": round(float((gamma < depth).float().mean()), 4)}
    if histogram:
        hist = torch.bincount(gamma, minlength=depth + 1)[1:]
        entry["stop_fraction_by_depth"] = {str(d + 1): round(float(c) / gamma.numel(), 4) for d, c in enumerate(hist)}
    if width == 1:  # a chain: tokens the target would accept in a row (Leviathan et al.) vs where the rule stopped
        run = accepted[:, 0].long().cumprod(-1).sum(-1)
        entry["premature_stop_fraction"] = round(float((gamma < run).float().mean()), 4)
        entry["accepted_tokens_lost_per_round"] = round(float((run - torch.minimum(run, gamma)).float().mean()), 3)
        entry["draft_tokens_saved_per_round"] = round(float((depth - gamma).float().mean()), 3)
    return entry


def early_stop_figures(pred: torch.Tensor, accepted: torch.Tensor, threshold: float, lookahead: int,
                       widths=(1, 2, 16), sweep=(0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)) -> dict:
    """The rule at β (γ histogram) and over a sweep of β, for W = 1 (chain), 2 (§5's fork), 16 (§4.1)."""
    widths = [w for w in widths if w <= pred.size(1)]
    return {"threshold": threshold,
            "at_threshold": {f"W={w}": rule_figures(pred, accepted, threshold, lookahead, w, True) for w in widths},
            "sweep": {f"W={w}": {str(b): rule_figures(pred, accepted, b, lookahead, w) for b in sweep}
                      for w in widths}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.7])
    ap.add_argument("--fit-contexts", type=int, default=1800)
    ap.add_argument("--val-contexts", type=int, default=200)
    ap.add_argument("--eval-contexts", type=int, default=400)
    ap.add_argument("--width", type=int, default=16, help="W, sequences per fork (mcsd §4.1: 16)")
    ap.add_argument("--depth", type=int, default=5, help="D, tokens per sequence (mcsd §4.1: 5)")
    ap.add_argument("--top-k", type=int, default=DEFAULT_TOP_K)
    ap.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD, help="β (mcsd §3.3: 0.4)")
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--bootstrap", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "harness" / "assets" / "decision_models"))
    ap.add_argument("--report", help="also write the evaluation figures of every model to this JSON file")
    ap.add_argument("--labels-cache", help="a folder: reuse the collected labels from it, or save them there "
                                           "(same arguments expected; not for git)")
    args = ap.parse_args(argv)
    if not 1 <= args.top_k <= 4096:
        ap.error(f"--top-k must be in [1, 4096], got {args.top_k}")
    torch.set_num_threads(args.threads)

    pair = load_pair("tiny/target", "tiny/draft", device="cpu")
    parts = split_training_chapters(pair.tokenizer)
    counts = {"fit": args.fit_contexts, "val": args.val_contexts, "eval": args.eval_contexts}
    summary = {}
    for temperature in args.temperatures:
        warp = Warp(temperature=temperature)
        rng = random.Random(args.seed)
        gen = make_generator(args.seed, "cpu")
        data, started = {}, time.perf_counter()
        cache_file = Path(args.labels_cache) / f"labels_temp{temperature:g}.pt" if args.labels_cache else None
        if cache_file is not None and cache_file.exists():
            data = torch.load(cache_file)
            print(f"T={temperature}: labels from {cache_file}", flush=True)
        for part in ("fit", "val", "eval"):
            if part in data:
                continue
            contexts = sample_contexts(parts[part], counts[part], rng)
            data[part] = collect(pair, contexts, args.width, args.depth, warp, args.top_k, gen)
            print(f"T={temperature}: {part}: {len(contexts)} contexts from {len(parts[part])} chapters, "
                  f"{time.perf_counter() - started:.0f}s", flush=True)
        if cache_file is not None and not cache_file.exists():
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            torch.save(data, cache_file)
        ev = data["eval"]
        alpha = float(ev["accepted"].float().mean())
        base = {
            "pair": "tiny (harness/assets/tiny_pair)", "temperature": temperature, "warp": warp.as_dict(),
            "width": args.width, "depth": args.depth, "threshold": args.threshold,
            "threshold_source": "mcsd §3.3 (0.4 for both decision models), Fig. 2",
            "data": {"corpus": "KJV training split of scripts/train_tiny_pair.py (every 25th chapter, offset 7, "
                               "held out there and never read here)",
                     "split": "training-split chapters by index % 10: 3 → eval (held-out labels), 6 → val, rest → fit",
                     "contexts": counts, "chapters": {k: len(v) for k, v in parts.items()},
                     "context_tokens": [8, 96], "seed": args.seed},
            "eval_token_acceptance_rate": round(alpha, 4),
            "eval_baseline_auc": {"draft q(x)": round(roc_auc(ev["q_x"], ev["accepted"]), 4),
                                  "draft top-1 probability": round(roc_auc(ev["q_top1"], ev["accepted"]), 4),
                                  "oracle min(1, p/q)": round(roc_auc(ev["accept_prob"], ev["accepted"]), 4)},
            "script": "scripts/train_decision_models.py",
        }
        for kind, target_key, description in (
                ("t1", "accept_prob", "3-layer MLP on the draft's last hidden state (mcsd §3.3, P_T1 = MLP(y_i^H)); "
                                      "label min(1, p/q) (the seed prints max; the acceptance probability is min)"),
                ("t2", "accepted", "2-layer MLP on ConCat(Topk(y_i^D), Ent(y_i^D)) of the warped draft distribution "
                                   "(mcsd §3.3, P_T2); label: sampled accept (1) / reject (0)")):
            in_features = pair.draft.config.hidden_size if kind == "t1" else args.top_k + 1
            torch.manual_seed(args.seed)  # the initial weights (training reseeds for its batch order)
            model = DecisionModel(kind, in_features, top_k=None if kind == "t1" else args.top_k)
            t0 = time.perf_counter()
            training = train_model(model, data["fit"], data["val"], target_key, args.epochs, args.lr, args.batch,
                                   args.seed)
            training["seconds"] = round(time.perf_counter() - t0, 1)
            pred = model.predict(features_of(ev, kind))  # (C, W, D)
            evaluation = {
                "auc_vs_sampled_outcome": round(roc_auc(pred, ev["accepted"]), 4),
                "auc_ci95": bootstrap_auc(pred, ev["accepted"], args.bootstrap, args.seed),
                "mean_prediction": round(float(pred.mean()), 4),
                "mean_acceptance_probability": round(float(ev["accept_prob"].mean()), 4),
                "brier_vs_acceptance_probability": round(float(((pred - ev["accept_prob"]) ** 2).mean()), 4),
                "rows": int(pred.numel()), "contexts": int(pred.size(0)),
                "prediction_quantiles": {str(q): round(float(pred.quantile(q)), 4) for q in (0.01, 0.1, 0.5, 0.9, 0.99)},
                "early_stop": early_stop_figures(pred, ev["accepted"], args.threshold, model.lookahead),
            }
            name = f"tiny_{kind}_temp{temperature:g}"
            info = {"description": description, **base, "training": training, "evaluation": evaluation,
                    "features": ("draft last hidden state (after the final norm) at token i's own position; "
                                 "judges the token just drafted (lookahead 0)"
                                 if kind == "t1" else
                                 f"top-{args.top_k} probabilities (descending) + entropy (nats) of "
                                 f"{'softmax(q) (greedy: T∘q is one-hot)' if warp.is_greedy else 'T∘q'} where "
                                 "token i is drawn; judges the next token (lookahead 1)")}
            path = model.save(args.out, name, info)
            summary[name] = {"auc": evaluation["auc_vs_sampled_outcome"], "auc_ci95": evaluation["auc_ci95"],
                             **{k: base[k] for k in ("eval_token_acceptance_rate", "eval_baseline_auc")},
                             "prediction_quantiles": evaluation["prediction_quantiles"],
                             "early_stop": evaluation["early_stop"]}
            print(f"{name}: AUC {evaluation['auc_vs_sampled_outcome']} {evaluation['auc_ci95']} → {path}", flush=True)
    print(json.dumps(summary, indent=2))
    if args.report:
        Path(args.report).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
