"""Train a tiny SpecDec++ acceptance-prediction head (Huang et al. 2024, arXiv:2405.19715) for the tiny pair.

Data (the reference's recipe: ``data/gen_*.py`` and ``specdec_pp/train.py``), under the ``sampling``
decoding preset (warp T: top-k 20, top-p 0.9, temperature 1 — the harness's default, so the head's
labels are acceptance probabilities under that warp). For each context of a part of the training split:
the TARGET samples a continuation X_1 … X_L from T∘p; at every i the draft, fed the target's context
X_<i, samples Y_i from T∘q and the label is Y_i's acceptance probability min(1, p_i(Y_i) / q_i(Y_i));
the training sequence is Z = Y with each position replaced by X_i with probability 0.15 (the
``mixing_ratio``; no loss there); the features are the draft's last hidden states over context + Z at Z_i's
own position. Loss: the two-class cross-entropy with soft labels, the rejected class weighted 6
(``weight_mismatch``), normalised by the weights, as the reference's ``MyTrainer``. Head: 3 residual
layers sharing one block (the reference's ``resnet_num_layers`` 3). AdamW; the epoch with the lowest
validation loss is kept.

Held-out figures (EVALUATION part): the AUC of the predicted p̂ against one sampled accept/reject
outcome per label (95 % bootstrap over contexts), on data made as above and on real draft chains
(the draft drafts 8 tokens from T∘q on its own, as in decoding — ``train_decision_models.collect``);
beside them the free baseline q(Y) and the oracle min(1, p/q); and the stop rule on the chains:
for thresholds h, the mean candidate length γ it picks (reference timing and bounds [2, 8]) and the
tokens accepted per round.

    python scripts/train_specdecpp_head.py                         # ~40 min wall on 2 busy shared CPUs
    python scripts/train_specdecpp_head.py --smoke --out /tmp/s    # tiny, for the tests
"""
from __future__ import annotations

import random
import sys
import time

import torch

from head_training import CORPUS, finish, out_dir, parser, setup

from harness.decoding import PRESETS
from harness.heads.specdecpp import AcceptanceHead, rejection_probability
from harness.decoders.decision_model import DEFAULT_TOP_K, roc_auc
from harness.primitives.forward import cache_kwarg
from harness.primitives.kv_cache import new_cache
from harness.primitives.sampling import make_generator, sample
from harness.primitives.warping import Warp
from train_decision_models import bootstrap_auc, collect, fit_epochs, sample_contexts

WEIGHT_MISMATCH, MIXING_RATIO = 6.0, 0.15


@torch.no_grad()
def reference_rows(pair, ctx: list[int], length: int, warp: Warp, gen) -> dict:
    """One context's rows of the reference's data: draft hidden at Z_i, label, sampled outcome, q(Y_i)."""
    target, draft, vocab = pair.target, pair.draft, pair.vocab_size
    cache, x, p_steps, xs = new_cache(target), torch.tensor([ctx]), [], []
    for _ in range(length):  # the target samples X from T∘p, one token at a time
        logits = target(input_ids=x, **{cache_kwarg(target): cache}, use_cache=True, logits_to_keep=1).logits[:, -1]
        p = warp.probs(logits[:, :vocab])
        x = sample(p, gen)
        p_steps.append(p[0])
        xs.append(int(x))
    m, p = len(ctx), torch.stack(p_steps)  # p[i] = T∘p(· | ctx, X_<i)
    q = warp.probs(draft(input_ids=torch.tensor([ctx + xs[:-1]])).logits[0, m - 1:, :vocab])
    y = sample(q, gen)[:, 0]
    q_y, p_y = q.gather(1, y[:, None])[:, 0], p.gather(1, y[:, None])[:, 0]
    label = torch.clamp(p_y / q_y, max=1.0)
    mixed = torch.rand(length, generator=gen) < MIXING_RATIO
    z = torch.where(mixed, torch.tensor(xs), y)
    hidden = draft.model(input_ids=torch.cat([torch.tensor(ctx), z])[None]).last_hidden_state[0, m:]
    keep = ~mixed
    return {"hidden": hidden[keep].half(), "label": label[keep], "q_y": q_y[keep],
            "accepted": torch.rand(int(keep.sum()), generator=gen) < label[keep]}


def reference_data(pair, contexts, length: int, warp: Warp, seed: int) -> dict:
    gen = make_generator(seed, "cpu")
    rows = [reference_rows(pair, ctx, length, warp, gen) for ctx in contexts]
    out = {k: torch.cat([r[k] for r in rows]) for k in rows[0]}
    out["context"] = torch.cat([torch.full((r["label"].numel(),), i) for i, r in enumerate(rows)])
    return out


def weighted_soft_ce(logits: torch.Tensor, label: torch.Tensor, weight: float = WEIGHT_MISMATCH) -> torch.Tensor:
    """The reference's loss: soft-label two-class CE, class 0 (rejected) weighted, normalised by the weights."""
    logp = torch.log_softmax(logits.float(), -1)
    num = -(weight * (1 - label) * logp[:, 0] + label * logp[:, 1]).sum()
    return num / (weight * (1 - label).sum() + label.sum())


def train_head(head: AcceptanceHead, fit: dict, val: dict, epochs: int, lr: float, batch: int, seed: int) -> dict:
    x, xv = fit["hidden"].float(), val["hidden"].float()
    torch.manual_seed(seed)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=0.0)
    t0 = time.perf_counter()
    history, best_epoch = fit_epochs(head, weighted_soft_ce, (x, fit["label"], xv, val["label"]), opt, epochs, batch)
    return {"epochs": epochs, "best_epoch": best_epoch, "val_loss": history, "fit_rows": int(x.size(0)),
            "val_rows": int(xv.size(0)), "lr": lr, "batch": batch, "seconds": round(time.perf_counter() - t0, 1),
            "loss": f"soft-label CE, rejected class weighted {WEIGHT_MISMATCH}"}


def auc_entry(pred, accepted, baseline, oracle, contexts_dim_first: bool, reps: int, seed: int) -> dict:
    entry = {"auc": round(roc_auc(pred, accepted), 4), "baseline_auc_q": round(roc_auc(baseline, accepted), 4),
             "oracle_auc": round(roc_auc(oracle, accepted), 4),
             "acceptance_rate": round(float(accepted.float().mean()), 4),
             "rows": int(accepted.numel())}
    if contexts_dim_first:
        entry["auc_ci95"] = bootstrap_auc(pred, accepted, reps, seed)
    return entry


def chain_gamma(pred: torch.Tensor, threshold: float, min_gamma: int, max_gamma: int) -> torch.Tensor:
    """γ the rule picks on each chain (C, D) of predictions: stop after k candidates when
    1 − ∏_{j<k} p̂_j > h (k ≥ min_gamma), at the latest k = max_gamma (the reference's timing)."""
    c, d = pred.shape
    judged = torch.cat([torch.ones(c, 1), pred[:, :-1]], dim=1)  # k-th decision sees p̂_1 … p̂_{k−1}
    reject = 1 - torch.cumprod(judged, dim=1)
    k = torch.arange(1, d + 1)
    stop = ((reject > threshold) & (k >= min_gamma)) | (k >= max_gamma)
    return torch.where(stop.any(1), stop.float().argmax(1) + 1, torch.full((c,), d))


def rule_figures(pred: torch.Tensor, accepted: torch.Tensor, min_gamma: int, thresholds) -> dict:
    run = accepted.long().cumprod(-1).sum(-1)  # tokens a chain would get accepted, in a row
    out = {}
    for h in thresholds:
        gamma = chain_gamma(pred, h, min_gamma, pred.size(1))
        got = torch.minimum(run, gamma)
        out[str(h)] = {"mean_gamma": round(float(gamma.float().mean()), 3),
                       "accepted_per_round": round(float(got.float().mean()), 3),
                       "rejected_or_unused_drafts_per_round": round(float((gamma - got).float().mean()), 3)}
    out["fixed_gamma_max"] = {"mean_gamma": pred.size(1), "accepted_per_round": round(float(run.float().mean()), 3)}
    return out


def evaluate(head, pair, parts, args, warp: Warp, ref_eval: dict) -> dict:
    rng = random.Random(args.seed + 2)
    chains_ctx = sample_contexts(parts["eval"], args.eval_contexts, rng, min_len=16, max_len=96)
    chains = collect(pair, chains_ctx, 1, args.chain_depth, warp, DEFAULT_TOP_K, make_generator(args.seed + 3, "cpu"))
    with torch.no_grad():
        pred_ref = head.accept_probability(ref_eval["hidden"].float())
        pred_chain = head.accept_probability(chains["hidden"][:, 0].float())  # (C, D)
    acc = chains["accepted"][:, 0]
    return {
        "reference_style_data": auc_entry(pred_ref, ref_eval["accepted"], ref_eval["q_y"], ref_eval["label"], False,
                                          args.bootstrap, args.seed),
        "draft_chains": auc_entry(pred_chain, acc, chains["q_x"][:, 0], chains["accept_prob"][:, 0], True,
                                  args.bootstrap, args.seed) | {"depth": args.chain_depth},
        "mean_prediction_on_chains": round(float(pred_chain.mean()), 4),
        "mean_rejection_probability_full_chain": round(float(rejection_probability(pred_chain).mean()), 4),
        "stop_rule_on_chains": rule_figures(pred_chain, acc, args.min_gamma, (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)),
    }


def main(argv=None) -> int:
    ap = parser(__doc__, "specdecpp")
    ap.add_argument("--layers", type=int, default=3, help="resnet_num_layers (reference: 3)")
    ap.add_argument("--fit-contexts", type=int, default=1200)
    ap.add_argument("--val-contexts", type=int, default=150)
    ap.add_argument("--eval-contexts", type=int, default=300)
    ap.add_argument("--length", type=int, default=32, help="target-sampled tokens per context")
    ap.add_argument("--chain-depth", type=int, default=8, help="draft chain length of the evaluation")
    ap.add_argument("--min-gamma", type=int, default=2, help="the rule's lower bound (reference: 2)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--bootstrap", type=int, default=300)
    args = ap.parse_args(argv)
    if args.smoke:
        args.fit_contexts, args.val_contexts, args.eval_contexts, args.length, args.epochs = 6, 3, 4, 8, 2
        args.bootstrap = 10
    pair, parts = setup(args.threads)
    decoding = PRESETS["sampling"]
    warp = Warp(decoding.temperature, decoding.top_k, decoding.top_p)
    rng, t0 = random.Random(args.seed), time.perf_counter()
    data = {part: reference_data(pair, sample_contexts(parts[part], n, rng, min_len=16, max_len=64), args.length,
                                 warp, args.seed + i)
            for i, (part, n) in enumerate((("fit", args.fit_contexts), ("val", args.val_contexts),
                                           ("eval", args.eval_contexts)))}
    data_seconds = round(time.perf_counter() - t0, 1)
    torch.manual_seed(args.seed)
    head = AcceptanceHead(pair.draft.config.hidden_size, args.layers)
    training = train_head(head, data["fit"], data["val"], args.epochs, args.lr, args.batch, args.seed)
    head.half().float()  # evaluate what ships (float16 weights)
    evaluation = evaluate(head.eval(), pair, parts, args, warp, data["eval"])
    out = out_dir(args, "specdecpp")
    head.save_pretrained(out, extra={"draft": "tiny/draft", "target": "tiny/target", "decoding": decoding.name,
                                     "warp": warp.as_dict()})
    report = {"head": "SpecDec++ acceptance prediction head (Huang et al. 2024, arXiv:2405.19715)",
              "draft": "tiny/draft", "target": "tiny/target", "warp": warp.as_dict(),
              "params": sum(p.numel() for p in head.parameters()), "data": CORPUS,
              "data_recipe": {"target_tokens_per_context": args.length, "mixing_ratio": MIXING_RATIO,
                              "contexts": {"fit": args.fit_contexts, "val": args.val_contexts,
                                           "eval": args.eval_contexts}, "seconds": data_seconds},
              "training": training | {"args": vars(args)}, "evaluation": evaluation,
              "script": "scripts/train_specdecpp_head.py"}
    return finish(out, report)


if __name__ == "__main__":
    sys.exit(main())
