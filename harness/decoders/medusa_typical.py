"""Medusa with its typical acceptance (Cai et al. 2024, arXiv:2401.10774 §2.3.1): lossy, the paper's sampling mode.

Drafting as ``medusa`` (:mod:`harness.decoders.medusa`). A tree node is typical iff
p_τ(x | context) > min(ε, δ · exp(−H(p_τ))) (:func:`~harness.primitives.acceptance.typical_mask`, the one
definition ``typical`` uses too); the accepted path is the longest all-typical one (ties: the first,
:func:`~harness.primitives.acceptance.typical_tree_keys`), and the token after it is drawn from T∘p there (as
``typical`` draws it; the reference's ``fast`` mode takes the argmax instead). The path is found on the device by
the tree walk (:func:`~harness.primitives.tree_walk.walk_tree`, one read per round). Greedy (temperature 0): a node is
typical iff it is the target's argmax, so the output is the target's greedy output.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.base import register
from harness.decoders.medusa import MedusaDecoder
from harness.decoders.params.medusa_typical import MedusaTypicalParams
from harness.primitives.acceptance import greedy_select, typical_select, typical_tree_keys
from harness.primitives.device import host_constant
from harness.primitives.spec_loop import TreeWalk
from harness.primitives.tree_walk import Verified, walk_tree
from harness.primitives.tree import tree_topology


@dataclass(frozen=True)
class TypicalTree:
    """The acceptance: the longest all-typical path of the verified tree, then a token from T∘p after it."""

    epsilon: float
    delta: float

    def __call__(self, v: Verified, generator) -> tuple[list[int], int]:
        tree = v.proposal.tree
        keys = None
        if tree.parents:  # rows of the target's logits where each node is proposed (row 0: after the stem)
            logits = v.chain_logits()
            device = logits.device
            parent_logits = logits.index_select(0, host_constant(tuple(p + 1 for p in tree.parents), device))
            keys = typical_tree_keys(parent_logits, tree.tokens.reshape(-1).to(device),
                                     tree_topology(tree.parents, device)[0], v.warp.temperature, self.epsilon,
                                     self.delta)
        walk = walk_tree(v, typical_select, generator, [-1], draw_next=True, keys=keys)
        assert walk.next_token is not None  # drawn (draw_next)
        v.next_ids = walk.next_ids
        return walk.paths[0], walk.next_token

    def greedy(self) -> TreeWalk:
        return TreeWalk(greedy_select)


@register
class MedusaTypical(MedusaDecoder[MedusaTypicalParams]):
    method = "medusa_typical"
    lossless_when_greedy = True  # the target's argmax decides every token

    def acceptance(self, spec):
        return TypicalTree(self.params.posterior_threshold, self.params.posterior_alpha)
