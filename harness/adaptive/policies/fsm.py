"""``fsm`` and ``cache_fsm``: the saturating-counter policies of the adaptive paper's §4.2."""
from __future__ import annotations

from dataclasses import dataclass

from harness.adaptive.policies.base import BoundedParams, BoundedPolicy, register_policy
from harness.primitives.round import Round


class FSMPolicy(BoundedPolicy):
    """FSM-based speculation: an n-bit saturating counter on γ.

    γ − 1 when a draft token was rejected, γ + 1 when all were accepted, saturating at
    [γ_min, γ_max]. A γ = 0 round (possible with ``gamma_min=0``) drafted nothing, so it counts
    as fully accepted and the next round probes γ = 1. Restarts at γ_init every generation.
    """

    def observe(self, obs: Round) -> None:
        self.gamma = self.clip(self.gamma + (1 if obs.accepted >= obs.gamma else -1))


class CacheFSMPolicy(BoundedPolicy):
    """Cache-enabled FSM-based speculation.

    A token cache is seeded with the prompt's tokens (``reset``) and, after every round, updated
    with the round's validated tokens (``obs.committed``: the accepted drafts and the target's
    token). γ then moves by: +1 if a validated token of this round was already in the cache
    (looked up before this round's update), −1 if none was; and +1 more when all γ drafts were
    accepted. Saturates at [γ_min, γ_max]; restarts at γ_init every generation.
    """

    def __init__(self, params: BoundedParams, gamma_init: int):
        super().__init__(params, gamma_init)
        self.cache: set[int] = set()

    def reset(self, prompt_ids: list[int]) -> None:
        super().reset(prompt_ids)
        self.cache = {int(t) for t in prompt_ids}

    def observe(self, obs: Round) -> None:
        hit = any(t in self.cache for t in obs.committed)
        delta = (1 if hit else -1) + (1 if obs.accepted >= obs.gamma else 0)
        self.cache.update(obs.committed)
        self.gamma = self.clip(self.gamma + delta)


@register_policy
@dataclass(frozen=True)
class FSMParams(BoundedParams):
    name = "fsm"
    Policy = FSMPolicy


@register_policy
@dataclass(frozen=True)
class CacheFSMParams(BoundedParams):
    name = "cache_fsm"
    Policy = CacheFSMPolicy
