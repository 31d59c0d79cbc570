"""Multi-candidate speculative decoding, MCSD (Yang et al. 2024; mcsd §2.2, Fig. 1).

The draft builds a token tree from a per-depth k-config, e.g. (4, 2, 2, 1): 4 candidates
for the first token, 2 children for each of them, and so on (4 + 8 + 16 + 16 nodes), one
draft forward per depth with tree attention. The target verifies the whole tree in ONE
forward with the topology-aware causal mask. Candidates are drawn without replacement
(MCSD's variant; Gumbel-top-k in draw order) and verified by multi-step speculative sampling
with the draft distribution renormalised after each rejected candidate — or, with
``replacement: true``, drawn i.i.d. and verified as in SpecInfer. Both are exact. Greedy
(temperature 0): each node's children are the draft's top-k tokens. The tree's depth γ is
``len(k_config)``; a γ policy (adaptive App. C.4: adaptive tree depth) may ask for less (the first levels
of the k-config) or more (chains of width 1 below its last level, as EAGLE-2's depth grows in App. C.4).
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.base import param, register
from harness.decoders.speculative import SpeculativeDecoder, SpeculativeParams
from harness.errors import ConfigError
from harness.primitives.acceptance import multi_step_select, multi_step_select_without_replacement
from harness.primitives.drafting import merge_duplicates
from harness.primitives.spec_loop import TreeWalk


def check_k_config(k_config, min_length: int = 1) -> tuple[int, ...]:
    """``k_config`` as a tuple of positive ints, at least ``min_length`` long; a ConfigError naming it otherwise."""
    try:
        out = tuple(int(k) for k in k_config)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"k_config must be a list of positive integers, got {k_config!r}") from e
    if len(out) < min_length or (out and min(out) < 1):
        raise ConfigError(f"k_config must be a list of at least {min_length} positive integer(s), got {k_config!r}")
    return out


@dataclass(frozen=True)
class MCSDParams(SpeculativeParams):
    k_config: tuple[int, ...] = param((4, 2, 2, 1), "children per node at each depth; depth γ = len(k_config) "
                                      "(mcsd: (4, 2, 2, 1))")
    replacement: bool = param(False, "false: candidates drawn without replacement (MCSD); true: i.i.d. (SpecInfer)")

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "k_config", check_k_config(self.k_config))

    @property
    def gamma(self) -> int:
        """The tree's depth γ."""
        return len(self.k_config)


@register
class MCSD(SpeculativeDecoder[MCSDParams]):
    method = "mcsd"
    lossless = True

    def acceptance(self, spec):
        return TreeWalk(multi_step_select if self.params.replacement else multi_step_select_without_replacement)

    def propose(self, spec, depth):
        k_config = list(self.params.k_config)
        widths = k_config[:depth] + [1] * (depth - len(k_config))
        return merge_duplicates(spec.draft_tree(widths, self.params.replacement, defer_invalid=True),
                                distinct=spec.warp.is_greedy)
