"""Medusa with its typical acceptance (Cai et al. 2024, arXiv:2401.10774 §2.3.1): lossy, the paper's sampling mode.

Drafting as ``medusa`` (:mod:`harness.decoders.medusa`). A tree node is typical iff
p_τ(x | context) > min(ε, δ · exp(−H(p_τ))) (:func:`~harness.primitives.acceptance.typical_mask`, the one
definition ``typical`` uses too); the accepted path is the longest all-typical one (ties: the first,
:func:`~harness.primitives.acceptance.typical_tree_path`), and the token after it is drawn from T∘p there (as
``typical`` draws it; the reference's ``fast`` mode takes the argmax instead). Greedy (temperature 0): a node is
typical iff it is the target's argmax, so the output is the target's greedy output.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.decoders.base import register
from harness.decoders.medusa import MedusaDecoder
from harness.decoders.params.medusa_typical import MedusaTypicalParams
from harness.primitives.acceptance import greedy_select, typical_tree_path
from harness.primitives.spec_loop import TreeWalk, Verified, draw


@dataclass(frozen=True)
class TypicalTree:
    """The acceptance: the longest all-typical path of the verified tree, then a token from T∘p after it."""

    epsilon: float
    delta: float

    def __call__(self, v: Verified, generator) -> tuple[list[int], int]:
        tree = v.proposal.tree
        logits = torch.cat([v.stem_logits[-1:], v.node_logits])  # row 0: after the stem, row i + 1: after node i
        parent_logits = logits[[p + 1 for p in tree.parents]]
        path = typical_tree_path(parent_logits, tree.tokens, tree.parents, v.warp.temperature, self.epsilon,
                                 self.delta)
        return path, draw(v.p(path[-1] if path else -1), v.warp, generator)

    def greedy(self) -> TreeWalk:
        return TreeWalk(greedy_select)


@register
class MedusaTypical(MedusaDecoder[MedusaTypicalParams]):
    method = "medusa_typical"
    lossless_when_greedy = True  # the target's argmax decides every token

    def acceptance(self, spec):
        return TypicalTree(self.params.posterior_threshold, self.params.posterior_alpha)
