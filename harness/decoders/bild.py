"""BiLD: big little decoder (Kim et al. 2023), the lossy baseline of the mtad paper (§5, §6, Table 15).

Fallback policy: the draft model generates tokens one at a time (sampled from T∘q) while its
confidence max T∘q(· | x_{<t}) ≥ τ1, at most γ tokens; a token drafted with confidence < τ1 is
dropped and control falls back to the target. Rollback policy: ONE target call scores the drafted
tokens; the first one whose negative log-likelihood −log T∘p(x_t | x_{<t}) exceeds τ2 is replaced,
with everything after it, by a token sampled from T∘p there; if none exceeds τ2 the target adds
the next token after the last draft. Lossy: the output does not follow T∘p exactly.

As in the mtad paper's code base (App. F), both models' distributions are warped by T before use, so
confidence and NLL are taken on T∘q and T∘p. With temperature 0 (one-hot T) no token ever falls
back and a draft survives iff it is the target's argmax: the output is the target's greedy output.
Table 15 defaults: γ = 10, τ1 = 0.9, τ2 ∈ {1, 2, 3} (2 here).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.decoders.base import register
from harness.decoders.params.bild import BiLDParams
from harness.decoders.speculative import SpeculativeDecoder
from harness.primitives.acceptance import bild_rule, parameterised
from harness.primitives.drafting import draft_tree
from harness.primitives.spec_loop import ChainAcceptance
from harness.primitives.spec_state import DraftTree, SpeculativeCaches


@dataclass
class BiLDExtras:
    fallbacks: int = 0  # rounds whose drafting stopped on a draft confidence < τ1 (rollbacks: rejected_rounds)


@register
class BiLD(SpeculativeDecoder[BiLDParams]):
    """Rounds: γ_r is the number of drafts sent to the target (the fallback token is not one), so a
    round is rejected (``rejected_rounds``) exactly when it rolls back."""

    method = "bild"
    lossless_when_greedy = True  # the target's argmax decides every token
    Extras = BiLDExtras

    def acceptance(self, spec):
        return ChainAcceptance(parameterised(bild_rule, threshold=self.params.rollback_threshold))

    def begin(self, spec):
        spec.state = BiLDExtras()

    def extras(self, spec):
        return spec.state

    def propose(self, spec, depth):
        tokens, num_fed, fell_back = self._draft_until_unsure(spec.caches, depth, spec.generator)
        spec.state.fallbacks += fell_back
        return DraftTree.chain(tokens, num_fed)

    def _draft_until_unsure(self, caches: SpeculativeCaches, depth: int, generator) -> tuple[torch.Tensor, int, bool]:
        """Fallback policy: draft token by token while the draft's confidence max T∘q ≥ τ1, at most ``depth``.

        Returns the drafts, how many of them the draft model has processed, and whether it fell back.
        """
        warp = self.params.warp
        drafted: list[torch.Tensor] = []
        num_fed, fell_back = 0, False
        while len(drafted) < depth:  # the draft runs token by token until it is unsure (fallback)
            num_fed = len(drafted)
            one = draft_tree(self.draft, caches, [1], warp, generator)
            confidence = 1.0 if warp.is_greedy else float(one.root_q.max())
            if confidence < self.params.fallback_threshold:
                fell_back = True
                break
            drafted.append(one.tokens)
            caches.draft_pending = one.tokens[None]
        else:
            num_fed = max(len(drafted) - 1, 0)
        tokens = torch.cat(drafted) if drafted else torch.empty(0, dtype=torch.long, device=self.device)
        return tokens, num_fed, fell_back
