"""Vanilla speculative decoding (Leviathan et al. 2023; Chen et al. 2023; seed 000 §2.2).

Each round the draft proposes γ tokens from T∘q with its KV cache (γ draft calls), the
target scores all of them in ONE forward, drafts are accepted with probability
min(1, p̃/q̃) up to the first rejection, and one more token comes from norm(max(0, p̃ − q̃))
(or from p̃ after γ acceptances). The output is distributed exactly as AR sampling from
T∘p; with temperature 0 it is the target's greedy output. γ per round comes from the
decoder's γ policy (``method.gamma_policy``, seed 004 §4; ``fixed`` = γ every round by default), and
the draft from ``method.draft_selection`` (seed 004 §5) when the pair lists several.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.base import Decoded, Decoder, SpeculativeParams, param, register
from harness.primitives.spec_loop import chain_step, speculative_loop
from harness.primitives.spec_state import SpeculativeCaches


@dataclass(frozen=True)
class SDParams(SpeculativeParams):
    gamma: int = param(4, "draft length γ per round (seed 002 Table 15: 4)")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma")


@register
class SpeculativeDecoding(Decoder[SDParams]):
    method = "sd"
    uses_draft = True
    uses_gamma_policy = True
    supports_draft_selection = True

    def _decode(self, prompt_ids, max_new_tokens, generator, stats) -> Decoded:
        warp = self.params.warp
        caches = SpeculativeCaches(self.target, self.draft, prompt_ids, self.sync_timing)

        def step(depth):
            return chain_step(self.target, self.draft, caches, depth, warp, generator)

        return Decoded(speculative_loop(step, self.gamma_policy, prompt_ids[0].tolist(), max_new_tokens,
                                        self.stopping, stats))
