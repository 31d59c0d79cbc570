"""ONE target forward over a drafted chain, a pluggable acceptance rule, and the rollback of both caches.

Shared by the chain methods whose rule is not speculative sampling (MTAD's joint-likelihood test,
BiLD's rollback, Medusa's typical acceptance): the rule sees the target logits at every chain
position and returns how many drafts to keep and the token that follows them.
"""
from __future__ import annotations

from typing import Callable

import torch

from harness.primitives.kv_cache import cache_length
from harness.primitives.speculative import DraftTree, SpeculativeCaches, StepResult, commit_draft
from harness.primitives.tree import TokenTree, commit_path, tree_forward

AcceptRule = Callable[[torch.Tensor, torch.Tensor], tuple[int, int]]


def chain_draft_tree(tokens: torch.Tensor, num_fed: int) -> DraftTree:
    """A chain of draft tokens of which the draft model has processed the first ``num_fed``."""
    return DraftTree(tokens, list(range(-1, tokens.numel() - 1)), None, None, num_fed)


def verify_chain(target, caches: SpeculativeCaches, dtree: DraftTree, draft_prefix: int, rule: AcceptRule,
                 device) -> StepResult:
    """Score the chain in ONE target call, apply ``rule(logits (n+1, V), tokens (n,)) -> (kept, next)``,
    keep the accepted path in both caches and make ``next`` pending for both models.

    ``draft_prefix`` is the draft cache length once its pending tokens were fed (before the chain).
    """
    target_prefix = cache_length(caches.target_cache) + caches.target_pending.size(1)
    stem_logits, node_logits = tree_forward(target, caches.target_cache, caches.target_pending,
                                            TokenTree.chain(dtree.tokens))
    logits = torch.cat([stem_logits[-1:], node_logits])
    kept, new_token = rule(logits, dtree.tokens)
    commit_path(caches.target_cache, target_prefix, range(target_prefix, target_prefix + kept))
    caches.target_pending = torch.tensor([[new_token]], device=device)
    commit_draft(caches, draft_prefix, dtree, list(range(kept)), new_token, device)
    return StepResult(dtree.tokens[:kept].tolist() + [new_token], drafted=dtree.tokens.numel(), accepted=kept)
