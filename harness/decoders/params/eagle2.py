"""``eagle2``'s keys (the head, the dynamic tree's top-k, depth and size; defaults: :mod:`harness.heads.defaults`)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SpeculativeParams, param
from harness.heads.defaults import DEFAULT_DEPTH, DEFAULT_TOP_K, DEFAULT_TOTAL_TOKENS, check_tree_params

@dataclass(frozen=True)
class Eagle2Params(SpeculativeParams):
    head: str = param("tiny/eagle", "EAGLE head: tiny/eagle (embedded, on tiny/target), a checkpoint directory or a "
                                    "hub id (SafeAILab/EAGLE layout)")
    tree_top_k: int = param(DEFAULT_TOP_K, "children per expanded node and nodes expanded per level (EAGLE-2's "
                                           "top_k: 10; top_k is the decoding's warp)")
    depth: int = param(DEFAULT_DEPTH, "deepest draft path, the round's γ (EAGLE-2's depth 5 + 1)")
    total_tokens: int = param(DEFAULT_TOTAL_TOKENS, "draft nodes kept after re-ranking, stem excluded "
                                                    "(EAGLE-2's total_token 60 − 1)")

    def __post_init__(self):
        super().__post_init__()
        check_tree_params(self.tree_top_k, self.depth, self.total_tokens)

    @property
    def gamma(self) -> int:
        return self.depth

    def nodes(self, depth: int) -> int:
        """``total_tokens``, clipped to what a tree of ``depth`` levels can hold."""
        return min(self.total_tokens, self.tree_top_k + (depth - 1) * self.tree_top_k ** 2)


Params = Eagle2Params
