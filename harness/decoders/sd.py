"""Vanilla speculative decoding (Leviathan et al. 2023; Chen et al. 2023; dsbd §2.2).

Each round the draft proposes γ tokens from T∘q with its KV cache (γ draft calls), the target scores all
of them in ONE forward, drafts are accepted with probability min(1, p̃/q̃) up to the first rejection, and
one more token comes from norm(max(0, p̃ − q̃)) (or from p̃ after γ acceptances). The output is distributed
exactly as AR sampling from T∘p; with temperature 0 it is the target's greedy output. γ per round comes
from the γ policy (``gamma_policy``, adaptive §4; ``fixed`` = γ every round), the draft from
``draft_selection`` (adaptive §5) when the pair lists several.
"""
from __future__ import annotations

from harness.decoders.base import register
from harness.decoders.params.sd import SDParams
from harness.decoders.speculative import SpeculativeDecoder
from harness.primitives.acceptance import speculative_sampling
from harness.primitives.spec_loop import ChainAcceptance


@register
class SpeculativeDecoding(SpeculativeDecoder[SDParams]):
    method = "sd"
    lossless = True
    supports_draft_stop = True  # a chain: a γ policy may end it inside the drafting (SpecDec++)
    accept = ChainAcceptance(speculative_sampling)

    def propose(self, spec, depth):
        return spec.draft_tree([1] * depth)
