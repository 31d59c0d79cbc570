"""Multi-candidate speculative decoding, MCSD (Yang et al. 2024; mcsd §2.2, Fig. 1).

The draft builds a token tree from a per-depth k-config, e.g. (4, 2, 2, 1): 4 candidates
for the first token, 2 children for each of them, and so on (4 + 8 + 16 + 16 nodes), one
draft forward per depth with tree attention. The target verifies the whole tree in ONE
forward with the topology-aware causal mask. Candidates are drawn without replacement
(MCSD's variant; Gumbel-top-k in draw order) and verified by multi-step speculative sampling
with the draft distribution renormalised after each rejected candidate — or, with
``replacement: true``, drawn i.i.d. and verified as in SpecInfer. Both are exact. Greedy
(temperature 0): each node's children are the draft's top-k tokens. The tree's depth γ is
``len(k_config)``; a γ policy (adaptive App. C.4: adaptive tree depth) may ask for less (the first levels
of the k-config) or more (chains of width 1 below its last level, as EAGLE-2's depth grows in App. C.4).
"""
from __future__ import annotations

from harness.decoders.base import register
from harness.decoders.params.mcsd import MCSDParams
from harness.decoders.speculative import SpeculativeDecoder
from harness.primitives.acceptance import multi_step_select, multi_step_select_without_replacement
from harness.primitives.drafting import merge_duplicates
from harness.primitives.spec_loop import TreeWalk


@register
class MCSD(SpeculativeDecoder[MCSDParams]):
    method = "mcsd"
    lossless = True

    def acceptance(self, spec):
        return TreeWalk(multi_step_select if self.params.replacement else multi_step_select_without_replacement)

    def propose(self, spec, depth):
        k_config = list(self.params.k_config)
        widths = k_config[:depth] + [1] * (depth - len(k_config))
        return merge_duplicates(spec.draft_tree(widths, self.params.replacement, defer_invalid=True),  # siblings drawn
                                distinct=spec.warp.is_greedy or not self.params.replacement)  # w/o replacement differ
