"""Target-initialised trees and sliced masks (mcsd §3.1-3.2): what the improved multi-candidate rounds add
to the one speculative round (:func:`~harness.primitives.spec_loop.speculative_round`).

* :class:`TreeMasks` — ONE :class:`~harness.primitives.tree.SlicedTreeMask` of the largest level-ordered
  tree per model, sliced for the draft's level forwards and the target's verification forward (§3.2);
* target-initialised rounds (§3.1): each round starts from r, the target's next-token distribution at
  the end of the committed sequence (round 1: the prompt prefill, :func:`target_prefill`, §3.1's extra
  target call; later: the correction distribution where the previous round stopped). n_t distinct roots
  are drawn from r without replacement (:func:`target_roots`), the draft expands each, ONE target forward
  scores the stem and every node, each root's subtree is walked with MCSD's rule, and the root with the
  longest accepted path wins (ties: the first drawn; :class:`BestRootWalk`). The round commits that root
  and its accepted drafts; r becomes the path's correction distribution (no token is drawn from it until
  the next round's roots).

Bias of target initialisation (§3.1). The winning root is not a draw from r: with n_t ≥ 2,
P_out(t) = Σ_{S ∋ t} P(roots = S) · P(t's accepted path is the longest of S's, first drawn on ties | S),
the paper's P_output(t) = P_target(t) × P_acceptance(t+1, t+2, … | t) made exact — tokens whose
drafts the target accepts are favoured, and the output distribution is not the target's (measured on
toy pairs in ``scripts/study_mcsd.py``; a slow test asserts it is detectable). With n_t = 1, S = {t}
with probability r(t) and t wins: the round is MCSD's with its correction token drawn one round
later, exact. (Greedy: r is the target's argmax, one-hot, with ONE distinct token, so greedy trees have a single
root whatever n_t is, and the output is the target's greedy output.)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.primitives.acceptance import SelectionRule, greedy_select
from harness.primitives.drafting import draw_children
from harness.primitives.spec_state import SpeculativeCaches
from harness.primitives.tree_attention import SlicedTreeMask
from harness.primitives.tree_walk import Verified, walk_tree
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
    """mcsd §3.1's extra target call: feed the target's pending tokens (the prompt); r = T∘p after them."""
    logits = target(caches.target_pending, caches.target_cache, all_logits=False)[0, -1]
    state.r = warp.probs(logits)
    caches.target_pending = caches.target_pending[:, :0]


def target_roots(state: TargetInit, n_t: int, warp: Warp, generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """n_t distinct roots drawn from r without replacement (greedy: r's argmax, one root), in draw order, and which
    of them are real (None: all), on the device and not read: where r has fewer than n_t tokens the last roots are
    dead — the drafting drops their children with its first level's read and never drafts below them
    (:func:`~harness.primitives.drafting.draft_tree`'s ``roots_valid``), and a dead root, childless and after the
    real ones, never wins (:class:`BestRootWalk`: ties go to the first drawn)."""
    if state.r is None:
        raise RuntimeError("a target-initialised round needs r: call target_prefill first")
    r = state.r[None]
    kids, valid = draw_children(r, r, 1 if warp.is_greedy else n_t, warp, False, generator)
    return kids.reshape(-1), None if valid is None else valid.reshape(-1)


@dataclass(frozen=True)
class BestRootWalk:
    """The acceptance of a target-initialised tree: every root's subtree walked with ``select``, the root
    with the longest accepted path wins (ties: the first drawn); r becomes its correction distribution and no
    token is drawn (the root stands in for it, mcsd §3.1)."""

    select: SelectionRule
    state: TargetInit

    def __call__(self, v: Verified, generator) -> tuple[list[int], None]:
        roots = v.proposal.candidates[-1]
        walk = walk_tree(v, self.select, generator, roots, draw_next=False)  # every root's subtree, one read
        best = max(range(len(roots)), key=lambda i: (len(walk.paths[i]), -i))
        self.state.r = walk.dist_at(walk.ends[best])
        self.state.other_root_wins += int(roots[best] != 0)
        return [roots[best]] + walk.paths[best], None

    def greedy(self) -> BestRootWalk:
        return BestRootWalk(greedy_select, self.state)
