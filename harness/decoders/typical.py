"""Typical acceptance (Medusa, Cai et al. 2024), the lossy baseline of the mtad paper's App. C.2, with a draft model.

The draft proposes γ tokens from T∘q with its KV cache (as in speculative decoding); ONE target call
scores them. Draft x_t is typical, and accepted, iff

    p_τ(x_t | x_{<t}) > min(ε, δ · exp(−H(p_τ(· | x_{<t})))),

p_τ = softmax(logits / temperature), H its entropy: the bar is ε where the target is unsure and
falls where it is confident. The longest all-typical prefix is kept and one more token is sampled
from T∘p after it (:func:`~harness.primitives.acceptance.typical_rule`). Medusa's defaults: ε = 0.09, δ = √ε = 0.3. Temperature 0 is greedy: a draft is
accepted iff it is the target's argmax, so the output is the target's greedy output.
"""
from __future__ import annotations

from harness.decoders.base import register
from harness.decoders.params.typical import TypicalParams
from harness.decoders.speculative import SpeculativeDecoder
from harness.primitives.acceptance import parameterised, typical_rule
from harness.primitives.spec_loop import ChainAcceptance


@register
class Typical(SpeculativeDecoder[TypicalParams]):
    method = "typical"
    lossless_when_greedy = True  # the target's argmax decides every token

    def acceptance(self, spec):
        return ChainAcceptance(parameterised(typical_rule, epsilon=self.params.posterior_threshold,
                                             delta=self.params.posterior_alpha))

    def propose(self, spec, depth):
        return spec.draft_tree([1] * depth)
