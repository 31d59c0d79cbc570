"""Vanilla speculative decoding (Leviathan et al. 2023; Chen et al. 2023; seed 000 §2.2).

Each iteration the draft proposes γ tokens from T∘q with its KV cache (γ draft calls), the
target scores all of them in ONE forward, drafts are accepted with probability
min(1, p̃/q̃) up to the first rejection, and one more token comes from norm(max(0, p̃ − q̃))
(or from p̃ after γ acceptances). The output is distributed exactly as AR sampling from
T∘p; with temperature 0 it is the target's greedy output.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.ar_sampling import SamplingParams
from harness.decoders.base import Decoder, GenerationStats, register
from harness.errors import ConfigError
from harness.primitives.speculative import SpeculativeCaches, chain_step, speculative_loop


@dataclass(frozen=True)
class SDParams(SamplingParams):
    gamma: int = 4  # draft length γ (seed 002 Table 15)

    def __post_init__(self):
        super().__post_init__()
        if self.gamma < 1:
            raise ConfigError(f"gamma (draft length) must be >= 1, got {self.gamma}")


@register
class SpeculativeDecoding(Decoder):
    method = "sd"
    Params = SDParams
    uses_draft = True

    def _decode(self, prompt_ids, max_new_tokens, generator, stats: GenerationStats) -> list[int]:
        warp = self.params.warp
        caches = SpeculativeCaches(self.target, self.draft, prompt_ids)

        def step(depth):
            return chain_step(self.target, self.draft, caches, depth, warp, generator)

        return speculative_loop(step, self.params.gamma, max_new_tokens, self.eos_token_id, stats)
