"""Train a tiny EAGLE draft head (Li et al. 2024, arXiv:2401.15077; used by EAGLE-2, arXiv:2406.16858)
on the embedded tiny target.

Recipe (the reference's ``eagle/train/main.py``): the target is frozen and supplies its features f_i
(post-norm last hidden states) on data windows; the head reads (f_i, x_{i+1}) for every position and
predicts f_{i+1}. Loss = SmoothL1(f̂, f) + 0.1 · cross-entropy of the target's LM head on f̂ toward
the target's own next-token distribution (its ``v_w`` 1.0 and ``p_w`` 0.1); the input features get
uniform noise U(−0.1, 0.1) (the paper's data augmentation). The head is one Llama decoder layer of the
target's shape (no input norm in layer 0) after fc(2H → H, bias), randomly initialised. AdamW,
10 % warm-up then cosine. Data: windows of the fit part of the training split (``head_training.py``).

Held-out figures (EVALUATION part): the teacher-forced top-1 agreement of the LM head on f̂_{i+1} with
the target's argmax on f_{i+1} (the reference's training accuracy, on held-out windows); and, at the
end of held-out contexts, the mean accepted length of greedy verification (accepted draft tokens + the
target's own token) of an EAGLE-2 tree (default top_k/depth/total_tokens), of an EAGLE chain (top-1
at every depth), and — beside them, on the same contexts — of a greedy chain of the tiny draft model
(vanilla speculative decoding, the same depth).

    python scripts/train_eagle_head.py                        # ~35 min wall on 2 busy shared CPUs
    python scripts/train_eagle_head.py --smoke --out /tmp/e   # a few steps, for the tests
"""
from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

from head_training import CORPUS, eval_contexts, finish, greedy_accepted, greedy_rollouts, out_dir, parser, setup, \
    stream, train_loop, windows

from harness.heads.eagle import DEFAULT_DEPTH, DEFAULT_TOP_K, DEFAULT_TOTAL_TOKENS, EagleHead, causal_mask, \
    eagle_draft_tree

P_WEIGHT, V_WEIGHT, NOISE = 0.1, 1.0, 0.1


def head_config(target):
    from transformers import LlamaConfig

    cfg = LlamaConfig(**target.config.to_dict())
    cfg.num_hidden_layers = 1
    return cfg


def predict(head: EagleHead, target, ids: torch.Tensor, noise: float):
    """Features of ``ids`` (B, T + 1) and the head's f̂_1 … f̂_T from (f_i [+ noise], x_{i+1})."""
    with torch.no_grad():
        feats = target.model(input_ids=ids).last_hidden_state
    inp = feats[:, :-1]
    if noise:
        inp = inp + (torch.rand_like(inp) * 2 - 1) * noise
    t = inp.size(1)
    pred = head(inp, target.get_input_embeddings()(ids[:, 1:]), torch.arange(t)[None].expand(ids.size(0), -1),
                causal_mask(t, 0, inp.dtype))
    return feats[:, 1:], pred


def eagle_loss(head: EagleHead, target, ids: torch.Tensor, vocab: int, noise: float):
    truth, pred = predict(head, target, ids, noise)
    with torch.no_grad():
        p_target = torch.softmax(target.lm_head(truth)[..., :vocab].float(), -1)
    logp = torch.log_softmax(target.lm_head(pred)[..., :vocab].float(), -1)
    vloss = F.smooth_l1_loss(pred, truth)
    ploss = -(p_target * logp).sum(-1).mean()
    top1 = float((logp.argmax(-1) == p_target.argmax(-1)).float().mean())
    return V_WEIGHT * vloss + P_WEIGHT * ploss, {"vloss": round(vloss.item(), 4), "ploss": round(ploss.item(), 3),
                                                 "top1": round(top1, 3)}


@torch.no_grad()
def teacher_forced(head, target, eval_stream, seq_len: int, vocab: int, max_windows: int) -> dict:
    hit = n = 0
    for i, s in enumerate(range(0, len(eval_stream) - seq_len - 1, seq_len)):
        if i == max_windows:
            break
        truth, pred = predict(head, target, eval_stream[s:s + seq_len + 1][None], 0.0)
        agree = target.lm_head(pred)[..., :vocab].argmax(-1) == target.lm_head(truth)[..., :vocab].argmax(-1)
        hit += int(agree.sum())
        n += truth.shape[1]
    return {"top1_agreement": round(hit / n, 4), "predictions": n}


@torch.no_grad()
def draft_chain(draft, ids: list[int], depth: int) -> list[int]:
    out = list(ids)
    for _ in range(depth):
        out.append(int(draft(torch.tensor([out])).logits[0, -1].argmax()))
    return out[len(ids):]


@torch.no_grad()
def acceptance(head, pair, contexts, vocab: int, depth: int) -> dict:
    """Mean accepted length at the end of held-out contexts: EAGLE-2 tree, EAGLE chain, the draft's chain."""
    target = pair.target
    roll = greedy_rollouts(target, contexts, depth + 1)
    embed, lm = target.get_input_embeddings(), target.lm_head
    sums = {"eagle2_tree": 0, "eagle_chain": 0, "draft_chain": 0}
    for ctx, greedy in zip(contexts, roll["tokens"].tolist()):
        feats = target.model(input_ids=torch.tensor([ctx])).last_hidden_state
        toks = torch.tensor([ctx[1:] + greedy[:1]])  # x_1 … x_n: the stem is the target's first greedy token
        for name, k, total in (("eagle2_tree", DEFAULT_TOP_K, DEFAULT_TOTAL_TOKENS), ("eagle_chain", 1, depth)):
            tree = eagle_draft_tree(head, embed, lm, feats, toks, top_k=k, depth=depth, total_tokens=total,
                                    vocab_size=vocab)
            sums[name] += greedy_accepted(tree.parents.tolist(), tree.depths.tolist(), tree.tokens.tolist(), greedy[1:])
        chain = draft_chain(pair.draft, ctx + greedy[:1], depth)
        sums["draft_chain"] += greedy_accepted(list(range(-1, depth - 1)), list(range(1, depth + 1)), chain, greedy[1:])
    return {name: round(v / len(contexts), 4) for name, v in sums.items()} | {
        "contexts": len(contexts), "depth": depth,
        "eagle2_tree_params": {"top_k": DEFAULT_TOP_K, "depth": depth, "total_tokens": DEFAULT_TOTAL_TOKENS},
        "definition": "accepted draft tokens + 1 per target forward under greedy verification"}


def main(argv=None) -> int:
    ap = parser(__doc__, "eagle")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-contexts", type=int, default=200)
    args = ap.parse_args(argv)
    if args.smoke:
        args.steps, args.batch, args.seq_len, args.eval_contexts = 3, 2, 32, 2
    pair, parts = setup(args.threads)
    target, vocab = pair.target, pair.vocab_size
    for p in target.parameters():
        p.requires_grad_(False)
    torch.manual_seed(args.seed)
    head = EagleHead(head_config(target), bias=True)
    data = windows(stream(parts["fit"]), args.seq_len, args.batch, args.seed)

    def step(_):
        ids = next(data)
        loss, logs = eagle_loss(head, target, ids, vocab, NOISE)
        return loss, ids[:, 1:].numel(), logs

    training = train_loop(head.parameters(), args.steps, args.lr, step, name="eagle")
    head.eval()
    head.half().float()  # evaluate what ships (float16 weights)
    t0 = time.perf_counter()
    evaluation = {"teacher_forced": teacher_forced(head, target, stream(parts["eval"]), args.seq_len, vocab,
                                                   8 if args.smoke else 64),
                  "accepted_length": acceptance(head, pair, eval_contexts(parts, args.eval_contexts, args.seed + 1),
                                                vocab, DEFAULT_DEPTH)}
    evaluation["seconds"] = round(time.perf_counter() - t0, 1)
    out = out_dir(args, "eagle")
    head.save_pretrained(out, extra={"base_model_name_or_path": "tiny/target"})
    report = {"head": "EAGLE draft head (Li et al. 2024, arXiv:2401.15077; EAGLE-2 tree arXiv:2406.16858)",
              "target": "tiny/target", "params": sum(p.numel() for p in head.parameters()), "data": CORPUS,
              "training": training | {"batch": args.batch, "seq_len": args.seq_len, "loss": "SmoothL1 + 0.1 CE",
                                      "feature_noise": f"uniform ±{NOISE}", "args": vars(args)},
              "evaluation": evaluation, "script": "scripts/train_eagle_head.py"}
    return finish(out, report)


if __name__ == "__main__":
    sys.exit(main())
