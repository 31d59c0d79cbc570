"""Multi-candidate speculative decoding, MCSD (Yang et al. 2024; seed 003 §2.2, Fig. 1).

The draft builds a token tree from a per-depth k-config, e.g. (4, 2, 2, 1): 4 candidates
for the first token, 2 children for each of them, and so on (4 + 8 + 16 + 16 nodes), one
draft forward per depth with tree attention. The target verifies the whole tree in ONE
forward with the topology-aware causal mask. Candidates are drawn without replacement
(MCSD's variant; Gumbel-top-k in draw order) and verified by multi-step speculative sampling
with the draft distribution renormalised after each rejected candidate — or, with
``replacement: true``, drawn i.i.d. and verified as in SpecInfer. Both are exact. Greedy
(temperature 0): each node's children are the draft's top-k tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.ar_sampling import SamplingParams
from harness.decoders.base import Decoder, GenerationStats, register
from harness.errors import ConfigError
from harness.primitives.speculative import SpeculativeCaches, speculative_loop, tree_step


@dataclass(frozen=True)
class MCSDParams(SamplingParams):
    k_config: tuple[int, ...] = (4, 2, 2, 1)  # children per node at each depth; depth γ = len(k_config)
    replacement: bool = False

    def __post_init__(self):
        super().__post_init__()
        try:
            k_config = tuple(int(k) for k in self.k_config)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"k_config must be a list of positive integers, got {self.k_config!r}") from e
        if not k_config or min(k_config) < 1:
            raise ConfigError(f"k_config must be a non-empty list of positive integers, got {self.k_config!r}")
        object.__setattr__(self, "k_config", k_config)


@register
class MCSD(Decoder):
    method = "mcsd"
    Params = MCSDParams
    uses_draft = True

    def _decode(self, prompt_ids, max_new_tokens, generator, stats: GenerationStats) -> list[int]:
        warp, k_config = self.params.warp, list(self.params.k_config)
        caches = SpeculativeCaches(self.target, self.draft, prompt_ids)

        def step(depth):
            return tree_step(self.target, self.draft, caches, k_config[:depth], warp, generator, "multi_step",
                             self.params.replacement)

        return speculative_loop(step, len(k_config), max_new_tokens, self.eos_token_id, stats)
