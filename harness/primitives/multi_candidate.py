"""Improved multi-candidate rounds (seed 003): target-initialised trees and dynamic, sliced, early-stopped drafting.

One round, :func:`multi_candidate_step`, on a token tree kept in level (breadth-first) order so that
its topology-aware mask is a slice of ONE :class:`~harness.primitives.tree.SlicedTreeMask` built for
the largest tree (§3.2), for the draft's level forwards and for the target's verification forward:

* draft-initialised (``state`` None): MCSD's round — the draft draws every level (siblings without
  replacement, Gumbel-top-k), ONE target forward, the walk with MCSD's selection rule (Yang et al.
  2024 Alg. 2), one correction/bonus token. Exact for any tree shape, including a depth chosen while
  drafting by a stop hook (a :class:`~harness.primitives.drafting.DraftStop`: it only sees what is
  drawn, so the shape is a stopping time);
* target-initialised (``state`` a :class:`TargetInit`, §3.1): the round starts from r, the target's
  next-token distribution at the end of the committed sequence (round 1: the prompt prefill,
  :func:`target_prefill`, §3.1's extra target call; later: the correction distribution where the
  previous round stopped). n_t = ``widths[0]`` distinct roots are drawn from r without replacement,
  the draft expands each per ``widths[1:]``, ONE target forward scores the stem and every node, each
  root's subtree is walked with MCSD's rule, and the root with the longest accepted path wins (ties:
  the first drawn). The round commits that root and its accepted drafts; r becomes the path's
  correction distribution (no token is drawn from it until the next round's roots).

Bias of target initialisation (§3.1). The winning root is not a draw from r: with n_t ≥ 2,
P_out(t) = Σ_{S ∋ t} P(roots = S) · P(t's accepted path is the longest of S's, first drawn on ties | S),
the seed's P_output(t) = P_target(t) × P_acceptance(t+1, t+2, … | t) made exact — tokens whose
drafts the target accepts are favoured, and the output distribution is not the target's (measured on
toy pairs in ``scripts/study_mcsd.py``; a slow test asserts it is detectable). With n_t = 1, S = {t}
with probability r(t) and t wins: the round is MCSD's with its correction token drawn one round
later, exact. (Greedy: r is the target's argmax, one-hot, with ONE distinct token, so greedy trees have a single
root whatever n_t is, and the output is the target's greedy output.)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.primitives.acceptance import greedy_select, multi_step_select_without_replacement
from harness.primitives.drafting import DraftStop, draft_tree, draw_children
from harness.primitives.spec_loop import accept_walk, draw
from harness.primitives.spec_state import SpeculativeCaches, StepResult, commit_draft, commit_target
from harness.primitives.tree import SlicedTreeMask, TokenTree, children_lists, path_to, tree_forward
from harness.primitives.warping import Warp


@dataclass
class TargetInit:
    """Per-generation state of target-initialised rounds: ``r`` (V,), the target's warped next-token
    distribution at the end of the committed sequence, and ``other_root_wins``, the rounds whose winning
    root was not the first drawn (where the selection of §3.1 departed from a plain draw from r)."""

    r: torch.Tensor | None = None
    other_root_wins: int = 0


@dataclass(frozen=True)
class TreeMasks:
    """The sliced masks of the largest tree, one per model (one object when both use the same dtype)."""

    draft: SlicedTreeMask | None = None
    target: SlicedTreeMask | None = None

    @classmethod
    def for_parents(cls, parents, target, draft) -> TreeMasks:
        """Masks of the level-ordered tree ``parents`` for the target's and the draft's dtype and device."""
        def spec(model):
            return next(model.model.parameters()).dtype, model.device

        t = SlicedTreeMask(parents, dtype=spec(target)[0], device=spec(target)[1])
        d = t if spec(draft) == spec(target) else SlicedTreeMask(parents, dtype=spec(draft)[0], device=spec(draft)[1])
        return cls(draft=d, target=t)


def target_prefill(target, caches: SpeculativeCaches, warp: Warp, state: TargetInit) -> None:
    """§3.1's extra target call: feed the target's pending tokens (the prompt); r = T∘p after them."""
    logits = target(caches.target_pending, caches.target_cache, all_logits=False)[0, -1]
    state.r = warp.probs(logits)
    caches.target_pending = caches.target_pending[:, :0]


def multi_candidate_step(target, draft, caches: SpeculativeCaches, widths: list[int], warp: Warp, generator, *,
                         state: TargetInit | None = None, masks: TreeMasks = TreeMasks(),
                         stop: DraftStop | None = None) -> StepResult:
    """One round on a level-ordered tree (see the module docstring); ``widths`` are the tree's per-depth
    widths (target-initialised: ``widths[0]`` = n_t roots from ``state.r``). The StepResult's ``gamma``
    is the depth the draft reached (a stop hook may end it early), ``draft_nodes`` the draft's tokens
    (roots from the target excluded), ``accepted`` the committed draft tokens."""
    greedy = warp.is_greedy
    select = greedy_select if greedy else multi_step_select_without_replacement
    roots = None
    with caches.clock.drafting():
        draft_prefix = caches.draft_prefix()
        if state is not None:
            if state.r is None:
                raise RuntimeError("a target-initialised round needs r: call target_prefill first")
            r = state.r[None]
            kids, valid = draw_children(r, r, 1 if greedy else widths[0], warp, False, generator)
            roots = kids[valid] if valid is not None else kids.reshape(-1)
            widths = widths[1:]
        dtree = draft_tree(draft, caches, list(widths), warp, generator, replacement=False, roots=roots,
                           masks=masks.draft, stop=stop)
    with caches.clock.verifying():
        tree = TokenTree(dtree.tokens, dtree.parents)
        target_prefix = caches.target_prefix()
        stem_logits, node_logits = tree_forward(target, caches.target_cache, caches.target_pending, tree,
                                                sliced=masks.target, all_stem=False)
        children = children_lists(dtree.parents)

        def p_at(node):
            return warp.probs(stem_logits[-1] if node < 0 else node_logits[node])

        def q_at(node):
            return None if greedy else dtree.q_after(node)

        if state is None:
            path, dist = accept_walk(-1, children, tree.tokens, p_at, q_at, select, generator)
            new_token = draw(dist, warp, generator)
            committed = tree.tokens[path].tolist() + [new_token]
            accepted = len(path)
        else:
            best: list[int] | None = None
            for root in children[-1]:
                below, dist_i = accept_walk(root, children, tree.tokens, p_at, q_at, select, generator)
                if best is None or len(below) + 1 > len(best):
                    best, dist = [root] + below, dist_i
            path, new_token = best, None
            state.r = dist
            state.other_root_wins += int(path[0] != 0)
            committed = tree.tokens[path].tolist()
            accepted = len(path) - 1
        commit_target(caches, target_prefix, path, new_token)
        commit_draft(caches, draft_prefix, dtree, path, new_token)
    draft_s, verify_s = caches.clock.take()
    n = len(dtree.parents)
    levels = len(path_to(dtree.parents, n - 1)) if n else 0
    n_roots = 0 if roots is None else roots.numel()
    return StepResult(committed, gamma=levels - (1 if roots is not None else 0), draft_nodes=n - n_roots,
                      accepted=accepted, draft_time_s=draft_s, verify_time_s=verify_s)
