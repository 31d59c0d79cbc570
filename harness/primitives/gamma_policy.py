"""The γ-policy seam: the speculative loop asks a policy for each round's draft depth and tells it what happened.

One policy object per decoder, living across the prompts of a cell: :meth:`GammaPolicy.reset` starts
a generation, :meth:`GammaPolicy.next_gamma` gives γ for the next round, :meth:`GammaPolicy.observe`
reports the finished :class:`~harness.primitives.round.Round`. A policy sees only the past. The loop
(:func:`~harness.primitives.spec_loop.speculative_loop`) clips γ to the tokens still needed; γ = 0
means one plain target step (no drafting) in that round. The policies themselves (a fixed γ and the
adaptive ones of the adaptive paper) are :mod:`harness.adaptive.policies`.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from harness.primitives.round import Round


class GammaPolicy(ABC):
    """Interface of a draft-length policy (one object per decoder; it lives across a cell's prompts).

    ``needs_timing``: the policy reads the rounds' measured times, so the decoder synchronises the
    device around drafting and verification while it drives it.
    """

    needs_timing: bool = False

    def reset(self, prompt_ids: list[int]) -> None:
        """A new generation starts (reset per-generation state)."""

    @abstractmethod
    def next_gamma(self) -> int:
        """γ for the next round, within the policy's [gamma_min, gamma_max]."""

    def observe(self, obs: Round) -> None:
        """The round that used the last :meth:`next_gamma` has finished."""

    def warmup_generations(self) -> int:
        """Generations to run unrecorded and untimed before the first measured prompt (0: none)."""
        return 0
