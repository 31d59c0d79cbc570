"""Train tiny Medusa heads (Cai et al. 2024, arXiv:2401.10774) on the embedded tiny target.

Recipe (Medusa-1, the reference's ``train_legacy.py`` and ``scripts/train_vicuna_7b.sh``): the target is
frozen; head k (0-based) reads the target's last hidden state at position t and is trained with
cross-entropy toward the data token at t + k + 2; the heads' losses are summed; AdamW at lr 1e-3
without weight decay, 10 % warm-up then cosine; 3 heads of 1 residual layer. One choice of ours: each
head's vocabulary projection starts as a copy of the target's LM head (the reference starts it at
random), which matters on a budget of minutes. Data: windows of the fit part of the training split
(see ``scripts/head_training.py``).

Held-out figures (EVALUATION part): as the reference's ``medusa/eval/heads_accuracy.py``, the target
decodes greedily from held-out contexts and head k's top-1 (and top-5) at each step is compared with
the token the target chose k + 1 steps later; also the teacher-forced accuracy against the data, and
the mean accepted length of greedy verification of the default tree (``mc_sim_7b_63`` cut to the
heads there are): the longest tree path matching the target's greedy continuation, plus the target's
own token (tokens per target forward).

    python scripts/train_medusa_heads.py                      # ~16 CPU-min (89 min wall on 2 busy shared CPUs)
    python scripts/train_medusa_heads.py --smoke --out /tmp/m # a few steps, for the tests
"""
from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

from head_training import CORPUS, eval_contexts, finish, greedy_accepted, greedy_rollouts, out_dir, parser, setup, \
    stream, train_loop, windows

from harness.heads.medusa import MC_SIM_7B_63, MedusaConfig, MedusaHeads, medusa_tree, medusa_tree_tokens


def heads_loss(heads: MedusaHeads, target, ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Summed cross-entropy of head k at t toward the data token at t + k + 2, and each head's top-1."""
    with torch.no_grad():
        hidden = target.model(input_ids=ids).last_hidden_state
    logits = heads(hidden)  # (K, B, T, V)
    loss, logs = 0.0, {}
    for k in range(logits.size(0)):
        pred, label = logits[k, :, : -(k + 2)], ids[:, k + 2:]
        loss = loss + F.cross_entropy(pred.reshape(-1, pred.size(-1)), label.reshape(-1))
        logs[f"head{k}_top1"] = round(float((pred.argmax(-1) == label).float().mean()), 3)
    return loss, logs


@torch.no_grad()
def rollout_accuracy(heads: MedusaHeads, roll: dict, top: int = 5) -> dict:
    """Head k at step s vs the target's greedy token at s + k + 1 (heads_accuracy.py), top-1 and top-``top``."""
    logits = heads(roll["features"])  # (K, C, S, V)
    tokens, out = roll["tokens"], {}
    for k in range(logits.size(0)):
        cand = torch.topk(logits[k, :, : -(k + 1)], top, dim=-1).indices
        truth = tokens[:, k + 1:, None]
        out[f"head{k}"] = {"top1": round(float((cand[..., :1] == truth).any(-1).float().mean()), 4),
                           f"top{top}": round(float((cand == truth).any(-1).float().mean()), 4),
                           "predictions": int(truth.numel())}
    return out


@torch.no_grad()
def tree_accept_length(heads: MedusaHeads, roll: dict) -> dict:
    """Greedy verification of the default tree at every rollout step: accepted draft tokens + 1."""
    tree = medusa_tree(MC_SIM_7B_63, heads.config.num_heads)
    depth, lengths = max(tree.depths), []
    for feats, toks in zip(roll["features"], roll["tokens"]):
        for s in range(toks.numel() - depth - 1):
            cand = medusa_tree_tokens(tree, heads(feats[s])).tolist()
            lengths.append(greedy_accepted(list(tree.parents), list(tree.depths), cand, toks[s + 1:].tolist()))
    return {"tree": f"mc_sim_7b_63 cut to depth {depth} ({len(tree.parents)} nodes)",
            "mean_accepted_length": round(sum(lengths) / len(lengths), 4), "rounds": len(lengths)}


@torch.no_grad()
def data_accuracy(heads: MedusaHeads, target, eval_stream: torch.Tensor, seq_len: int, windows_max: int) -> dict:
    starts = range(0, len(eval_stream) - seq_len - 1, seq_len)
    hits, n = None, 0
    for i, s in enumerate(starts):
        if i == windows_max:
            break
        _, logs = heads_loss(heads, target, eval_stream[s:s + seq_len + 1][None])
        hits = {k: (hits or {}).get(k, 0.0) + v for k, v in logs.items()}
        n += 1
    return {k: round(v / n, 4) for k, v in hits.items()} | {"windows": n, "window_tokens": seq_len + 1}


def main(argv=None) -> int:
    ap = parser(__doc__, "medusa")
    ap.add_argument("--heads", type=int, default=3, help="medusa_num_heads (reference script: 3)")
    ap.add_argument("--layers", type=int, default=1, help="medusa_num_layers (reference: 1)")
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3, help="reference: 1e-3")
    ap.add_argument("--eval-contexts", type=int, default=100)
    ap.add_argument("--eval-steps", type=int, default=24, help="greedy steps per held-out context")
    args = ap.parse_args(argv)
    if args.smoke:
        args.steps, args.batch, args.seq_len, args.eval_contexts, args.eval_steps = 3, 2, 32, 2, 8
    pair, parts = setup(args.threads)
    target = pair.target
    for p in target.parameters():
        p.requires_grad_(False)
    torch.manual_seed(args.seed)
    config = MedusaConfig(args.heads, args.layers, target.config.hidden_size, pair.vocab_size, "tiny/target")
    heads = MedusaHeads(config)
    for stack in heads.medusa_head:  # warm start: the target's LM head (see the doc)
        stack[-1].weight.data.copy_(target.lm_head.weight.data[:pair.vocab_size])
    data = windows(stream(parts["fit"]), args.seq_len, args.batch, args.seed)

    def step(_):
        ids = next(data)
        loss, logs = heads_loss(heads, target, ids)
        return loss, ids.numel(), logs

    training = train_loop(heads.parameters(), args.steps, args.lr, step, name="medusa")
    heads.eval()
    heads.half().float()  # evaluate what ships (float16 weights)
    t0 = time.perf_counter()
    roll = greedy_rollouts(target, eval_contexts(parts, args.eval_contexts, args.seed + 1), args.eval_steps)
    evaluation = {"vs_target_greedy": rollout_accuracy(heads, roll), "tree": tree_accept_length(heads, roll),
                  "vs_data_teacher_forced": data_accuracy(heads, target, stream(parts["eval"]), args.seq_len,
                                                          8 if args.smoke else 64),
                  "contexts": args.eval_contexts, "greedy_steps": args.eval_steps,
                  "seconds": round(time.perf_counter() - t0, 1)}
    out = out_dir(args, "medusa")
    heads.save_pretrained(out)
    report = {"head": "Medusa (Cai et al. 2024, arXiv:2401.10774)", "target": "tiny/target",
              "config": config.to_json(), "params": sum(p.numel() for p in heads.parameters()),
              "data": CORPUS, "training": training | {"batch": args.batch, "seq_len": args.seq_len,
                                                      "init": "vocab projections copied from the target's LM head",
                                                      "args": vars(args)},
              "evaluation": evaluation, "script": "scripts/train_medusa_heads.py"}
    return finish(out, report)


if __name__ == "__main__":
    sys.exit(main())
