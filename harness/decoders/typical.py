"""Typical acceptance (Medusa, Cai et al. 2024), the lossy baseline of seed 002 App. C.2, with a draft model.

The draft proposes γ tokens from T∘q with its KV cache (as in speculative decoding); ONE target call
scores them. Draft x_t is typical, and accepted, iff

    p_τ(x_t | x_{<t}) > min(ε, δ · exp(−H(p_τ(· | x_{<t})))),

p_τ = softmax(logits / temperature), H its entropy: the bar is ε where the target is unsure and
falls where it is confident. The longest all-typical prefix is kept and one more token is sampled
from T∘p after it. Medusa's defaults: ε = 0.09, δ = √ε = 0.3. Temperature 0 is greedy: a draft is
accepted iff it is the target's argmax, so the output is the target's greedy output.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.decoders.base import Decoded, Decoder, SpeculativeParams, param, register
from harness.errors import ConfigError
from harness.primitives.drafting import draft_tree
from harness.primitives.sampling import sample
from harness.primitives.spec_loop import speculative_loop, verify_chain
from harness.primitives.spec_state import SpeculativeCaches


@dataclass(frozen=True)
class TypicalParams(SpeculativeParams):
    gamma: int = param(4, "draft length γ per round")
    posterior_threshold: float = param(0.09, "ε, the acceptance bar where the target is unsure (Medusa: 0.09)")
    posterior_alpha: float = param(0.3, "δ, scales exp(−H) (Medusa: √ε = 0.3)")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma")
        if not (0.0 <= self.posterior_threshold <= 1.0 and self.posterior_alpha >= 0.0):
            raise ConfigError(f"need posterior_threshold ε in [0, 1] and posterior_alpha δ >= 0, got "
                              f"{self.posterior_threshold}, {self.posterior_alpha}")


def typical_prefix_length(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, epsilon: float,
                          delta: float) -> int:
    """Number of leading drafts that pass Medusa's entropy-adaptive test (argmax match when greedy).

    ``logits`` (n, V) are the target's at the n draft positions, ``tokens`` (n,) the drafts.
    """
    if temperature == 0:
        ok = logits.argmax(-1) == tokens
    else:
        logp = torch.log_softmax(logits.float() / temperature, -1)
        entropy = -(logp.exp() * logp).nan_to_num().sum(-1)
        bar = torch.minimum(torch.full_like(entropy, epsilon), delta * torch.exp(-entropy))
        ok = logp.gather(1, tokens[:, None]).squeeze(1).exp() > bar
    return int(ok.long().cumprod(0).sum())


@register
class Typical(Decoder[TypicalParams]):
    method = "typical"
    uses_draft = True
    uses_gamma_policy = True
    supports_draft_selection = True

    def _decode(self, prompt_ids, max_new_tokens, generator, stats) -> Decoded:
        caches = SpeculativeCaches(self.target, self.draft, prompt_ids, self.sync_timing)
        params, warp = self.params, self.params.warp

        def rule(logits, drafted):
            kept = typical_prefix_length(logits[:-1], drafted, params.temperature, params.posterior_threshold,
                                         params.posterior_alpha)
            nxt = logits[kept].argmax() if warp.is_greedy else sample(warp.probs(logits[kept]), generator)[0]
            return kept, int(nxt)

        def step(depth: int):
            with caches.clock.drafting():
                draft_prefix = caches.draft_prefix()
                dtree = draft_tree(self.draft, caches, [1] * depth, warp, generator)
            return verify_chain(self.target, caches, dtree, draft_prefix, rule)

        return Decoded(speculative_loop(step, self.gamma_policy, prompt_ids[0].tolist(), max_new_tokens,
                                        self.stopping, stats))
