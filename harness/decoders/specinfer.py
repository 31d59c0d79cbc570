"""SpecInfer (Miao et al. 2024): a token tree from the draft, verified by multi-step speculative sampling.

As in the mtad paper's baseline (§5, Table 15): the draft samples m = ``num_drafts`` sequences of γ tokens
i.i.d. from T∘q; identical prefixes are merged into one token tree, which the target scores in ONE forward
with tree attention (dsbd §3.3). Verification walks down the tree: at each node the children (in draw
order, duplicates included) are tried with multi-step speculative sampling — accept with min(1, p̃/q̃),
else p̃ ← norm(max(0, p̃ − q̃)) — so the output is distributed exactly as AR sampling from T∘p. Greedy
(temperature 0): the m roots are the draft's top-m tokens, each continued greedily; the output is the
target's greedy one.
"""
from __future__ import annotations

from harness.decoders.base import register
from harness.decoders.params.specinfer import MultiDraftParams
from harness.decoders.speculative import SpeculativeDecoder
from harness.primitives.acceptance import multi_step_select
from harness.primitives.drafting import merge_duplicates
from harness.primitives.spec_loop import TreeWalk


@register
class SpecInfer(SpeculativeDecoder[MultiDraftParams]):
    method = "specinfer"
    lossless = True
    accept = TreeWalk(multi_step_select)

    def propose(self, spec, depth):
        widths = [self.params.num_drafts] + [1] * (depth - 1) if depth else []
        return merge_duplicates(spec.draft_tree(widths), distinct=spec.warp.is_greedy)
