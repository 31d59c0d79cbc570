"""BiLD: big little decoder (Kim et al. 2023), the lossy baseline of seed 002 (§5, §6, Table 15).

Fallback policy: the draft model generates tokens one at a time (sampled from T∘q) while its
confidence max T∘q(· | x_{<t}) ≥ τ1, at most γ tokens; a token drafted with confidence < τ1 is
dropped and control falls back to the target. Rollback policy: ONE target call scores the drafted
tokens; the first one whose negative log-likelihood −log T∘p(x_t | x_{<t}) exceeds τ2 is replaced,
with everything after it, by a token sampled from T∘p there; if none exceeds τ2 the target adds
the next token after the last draft. Lossy: the output does not follow T∘p exactly.

As in seed 002's code base (App. F), both models' distributions are warped by T before use, so
confidence and NLL are taken on T∘q and T∘p. With temperature 0 (one-hot T) no token ever falls
back and a draft survives iff it is the target's argmax: the output is the target's greedy output.
Table 15 defaults: γ = 10, τ1 = 0.9, τ2 ∈ {1, 2, 3} (2 here).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.decoders.ar_sampling import SamplingParams
from harness.decoders.base import Decoder, GenerationStats, register
from harness.errors import ConfigError
from harness.primitives.chain_verify import chain_draft_tree, verify_chain
from harness.primitives.kv_cache import cache_length
from harness.primitives.sampling import sample
from harness.primitives.speculative import SpeculativeCaches, draft_tree, speculative_loop


@dataclass(frozen=True)
class BiLDParams(SamplingParams):
    gamma: int = 10  # most draft tokens per iteration
    fallback_threshold: float = 0.9  # τ1 on the draft's confidence
    rollback_threshold: float = 2.0  # τ2 on the target's NLL (nats)

    def __post_init__(self):
        super().__post_init__()
        if self.gamma < 1:
            raise ConfigError(f"gamma must be >= 1, got {self.gamma}")
        if not 0.0 <= self.fallback_threshold <= 1.0:
            raise ConfigError(f"fallback_threshold (τ1) must be in [0, 1], got {self.fallback_threshold}")
        if self.rollback_threshold < 0:
            raise ConfigError(f"rollback_threshold (τ2) must be >= 0, got {self.rollback_threshold}")


def first_rollback(target_nll: torch.Tensor, threshold: float) -> int:
    """Index of the first draft whose target NLL exceeds τ2, or the number of drafts if none does."""
    bad = torch.nonzero(target_nll > threshold).flatten()
    return int(bad[0]) if bad.numel() else target_nll.numel()


@register
class BiLD(Decoder):
    method = "bild"
    Params = BiLDParams
    uses_draft = True

    def _decode(self, prompt_ids, max_new_tokens, generator, stats: GenerationStats) -> list[int]:
        caches = SpeculativeCaches(self.target, self.draft, prompt_ids)
        warp = self.params.warp
        stats.extra["fallbacks"] = stats.extra["rollbacks"] = 0

        def rule(logits, drafted):
            p = warp.probs(logits)
            nll = -torch.log(p[:-1].gather(1, drafted[:, None]).squeeze(1))
            kept = first_rollback(nll, self.params.rollback_threshold)
            stats.extra["rollbacks"] += int(kept < drafted.numel())
            return kept, int(sample(p[kept], generator)[0]) if not warp.is_greedy else int(p[kept].argmax())

        def step(depth: int):
            draft_prefix = cache_length(caches.draft_cache) + caches.draft_pending.size(1)
            drafted: list[torch.Tensor] = []
            num_fed = 0
            while len(drafted) < depth:  # the draft runs token by token until it is unsure (fallback)
                num_fed = len(drafted)
                one = draft_tree(self.draft, caches, [1], warp, generator)
                confidence = 1.0 if warp.is_greedy else float(one.root_q.max())
                if confidence < self.params.fallback_threshold:
                    stats.extra["fallbacks"] += 1
                    break
                drafted.append(one.tokens)
                caches.draft_pending = one.tokens[None]
            else:
                num_fed = max(len(drafted) - 1, 0)
            tokens = torch.cat(drafted) if drafted else torch.empty(0, dtype=torch.long, device=self.device)
            return verify_chain(self.target, caches, chain_draft_tree(tokens, num_fed), draft_prefix, rule,
                                self.device)

        return speculative_loop(step, self.params.gamma, max_new_tokens, self.eos_token_id, stats)
