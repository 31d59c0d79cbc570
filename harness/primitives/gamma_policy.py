"""The γ-policy seam: the speculative loop asks a policy for each round's draft depth and tells it what happened.

One policy object per decoder, living across the prompts of a cell: :meth:`GammaPolicy.reset` starts
a generation, :meth:`GammaPolicy.next_gamma` gives γ for the next round, :meth:`GammaPolicy.observe`
reports the finished round as a :class:`RoundObservation`. A policy sees only the past. The loop
driver (:func:`~harness.primitives.spec_loop.speculative_loop`) clips γ to the tokens still needed.
γ = 0 means one plain target step (no drafting) in that round.

:class:`FixedGamma` is the default and reproduces a fixed draft length exactly. Adaptive policies
(seed 004) live in their own module and implement the same three methods.
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.errors import ConfigError


@dataclass(frozen=True)
class RoundObservation:
    """One finished round, as the loop driver saw it."""

    gamma: int  # γ_r drafted this round (depth; 0 = one plain target step)
    accepted: int  # draft tokens committed on the accepted path
    draft_nodes: int  # tokens the draft proposed this round
    committed: tuple[int, ...]  # token ids committed this round (accepted drafts + the target's token)
    draft_time_s: float  # host time drafting (NaN if not measured)
    verify_time_s: float  # host time of the target verification call and acceptance


class GammaPolicy:
    """Interface of a draft-length policy (one object per decoder; it lives across a cell's prompts)."""

    def reset(self, prompt_ids: list[int]) -> None:
        """A new generation starts (reset per-generation state)."""

    def next_gamma(self) -> int:
        """γ for the next round, within the policy's [gamma_min, gamma_max]."""
        raise NotImplementedError

    def observe(self, obs: RoundObservation) -> None:
        """The round that used the last :meth:`next_gamma` has finished."""


class FixedGamma(GammaPolicy):
    """The same γ every round (vanilla speculative decoding's fixed draft length)."""

    def __init__(self, gamma: int):
        if int(gamma) < 0:
            raise ConfigError(f"gamma must be >= 0, got {gamma}")
        self.gamma = int(gamma)

    def next_gamma(self) -> int:
        return self.gamma

    def __repr__(self) -> str:
        return f"FixedGamma({self.gamma})"
