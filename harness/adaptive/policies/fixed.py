"""``fixed``: the same γ every round (vanilla speculative decoding; the adaptive paper's Alg. 1)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.adaptive.policies.base import GAMMA_INIT, PolicyParams, register_policy
from harness.errors import ConfigError
from harness.primitives.gamma_policy import GammaPolicy


class FixedGamma(GammaPolicy):
    """The same γ every round: the decoder's own ``gamma``."""

    name = "fixed"

    def __init__(self, gamma: int):
        if int(gamma) < 0:
            raise ConfigError(f"gamma must be >= 0, got {gamma}")
        self.gamma = int(gamma)

    def next_gamma(self) -> int:
        return self.gamma

    def __repr__(self) -> str:
        return f"FixedGamma({self.gamma})"


@register_policy
@dataclass(frozen=True)
class FixedParams(PolicyParams):
    """No keys: γ is the method's ``gamma``."""

    name = "fixed"

    def build(self, gamma: int = GAMMA_INIT, depth_cap: int | None = None) -> GammaPolicy:
        return FixedGamma(gamma)
