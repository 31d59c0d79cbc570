"""SpecInfer (Miao et al. 2024): a token tree from the draft, verified by multi-step speculative sampling.

As in seed 002's baseline (§5, Table 15): the draft samples m sequences of γ tokens i.i.d.
from T∘q; identical prefixes are merged into one token tree, which the target scores in
ONE forward with tree attention (seed 000 §3.3). Verification walks down the tree: at each
node the children (in draw order, duplicates included) are tried with multi-step
speculative sampling — accept with min(1, p̃/q̃), else p̃ ← norm(max(0, p̃ − q̃)) — so the
output is distributed exactly as AR sampling from T∘p. Greedy (temperature 0): the m roots
are the draft's top-m tokens, each continued greedily; the output is the target's greedy one.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.sd import SDParams
from harness.decoders.base import Decoder, GenerationStats, register
from harness.errors import ConfigError
from harness.primitives.speculative import SpeculativeCaches, speculative_loop, tree_step


@dataclass(frozen=True)
class MultiSequenceParams(SDParams):
    num_sequences: int = 2  # m ∈ {2, 4} (seed 002 Table 15; 2 in 7 of its 10 settings)

    def __post_init__(self):
        super().__post_init__()
        if self.num_sequences < 1:
            raise ConfigError(f"num_sequences (m) must be >= 1, got {self.num_sequences}")


@register
class SpecInfer(Decoder):
    method = "specinfer"
    Params = MultiSequenceParams
    uses_draft = True
    rule = "multi_step"

    def _decode(self, prompt_ids, max_new_tokens, generator, stats: GenerationStats) -> list[int]:
        warp, m = self.params.warp, self.params.num_sequences
        caches = SpeculativeCaches(self.target, self.draft, prompt_ids)

        def step(depth):
            return tree_step(self.target, self.draft, caches, [m] + [1] * (depth - 1), warp, generator, self.rule)

        return speculative_loop(step, self.params.gamma, max_new_tokens, self.eos_token_id, stats)
