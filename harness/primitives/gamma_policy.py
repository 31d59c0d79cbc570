"""The γ-policy seam: the speculative loop asks a policy for each round's draft depth γ_r and
tells it what happened (the shared contract in the helpers' notes; seed 004 §4 fills it).

A policy sees only the past. The loop clips γ to the tokens still needed. ``FixedGamma(gamma)``
is the default and reproduces the fixed-γ behaviour exactly. Adaptive policies live in
:mod:`harness.adaptive.policies`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RoundObservation:          # one finished round, as the loop driver saw it
    gamma: int                   # γ_r drafted this round (depth; 0 = one plain target step)
    accepted: int                # draft tokens committed on the accepted path
    draft_nodes: int             # tokens the draft proposed this round
    committed: tuple[int, ...]   # token ids committed this round (accepted drafts + the target's token)
    draft_time_s: float          # host time drafting (NaN if not measured)
    verify_time_s: float         # host time of the target verification call and acceptance


class GammaPolicy:               # one object per decoder; lives across the prompts of a cell
    def reset(self, prompt_ids: list[int]) -> None: ...   # a new generation starts (per-generation state)
    def next_gamma(self) -> int: ...                     # γ for the next round, within [gamma_min, gamma_max]
    def observe(self, obs: RoundObservation) -> None: ...


class FixedGamma(GammaPolicy):
    """γ_r = γ every round: today's behaviour."""

    def __init__(self, gamma: int):
        self.gamma = int(gamma)

    def reset(self, prompt_ids: list[int]) -> None:
        pass

    def next_gamma(self) -> int:
        return self.gamma

    def observe(self, obs: RoundObservation) -> None:
        pass
