"""SpecInfer (Miao et al. 2024): a token tree from the draft, verified by multi-step speculative sampling.

As in seed 002's baseline (§5, Table 15): the draft samples m = ``num_drafts`` sequences of γ tokens
i.i.d. from T∘q; identical prefixes are merged into one token tree, which the target scores in
ONE forward with tree attention (seed 000 §3.3). Verification walks down the tree: at each
node the children (in draw order, duplicates included) are tried with multi-step
speculative sampling — accept with min(1, p̃/q̃), else p̃ ← norm(max(0, p̃ − q̃)) — so the
output is distributed exactly as AR sampling from T∘p. Greedy (temperature 0): the m roots
are the draft's top-m tokens, each continued greedily; the output is the target's greedy one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from harness.decoders.base import Decoded, Decoder, param, register
from harness.decoders.sd import SDParams
from harness.primitives.acceptance import SelectionRule, multi_step_select
from harness.primitives.spec_loop import speculative_loop, tree_step
from harness.primitives.spec_state import SpeculativeCaches


@dataclass(frozen=True)
class MultiDraftParams(SDParams):
    num_drafts: int = param(2, "draft sequences m (seed 002 Table 15: 2 or 4; 2 in 7 of its 10 settings)")

    renamed = {"num_sequences": "num_drafts"}

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "num_drafts")


@register
class SpecInfer(Decoder[MultiDraftParams]):
    method = "specinfer"
    uses_draft = True
    uses_gamma_policy = True
    supports_draft_selection = True
    select: ClassVar[SelectionRule] = staticmethod(multi_step_select)

    def _decode(self, prompt_ids, max_new_tokens, generator, stats) -> Decoded:
        warp, m = self.params.warp, self.params.num_drafts
        caches = SpeculativeCaches(self.target, self.draft, prompt_ids, self.sync_timing)

        def step(depth):
            widths = [m] + [1] * (depth - 1) if depth else []
            return tree_step(self.target, self.draft, caches, widths, warp, generator, self.select)

        return Decoded(speculative_loop(step, self.gamma_policy, prompt_ids[0].tolist(), max_new_tokens,
                                        self.stopping, stats))
