"""``typical``'s keys (γ, ε, δ)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SpeculativeParams, param
from harness.errors import ConfigError


@dataclass(frozen=True)
class TypicalParams(SpeculativeParams):
    gamma: int = param(4, "draft length γ per round")
    posterior_threshold: float = param(0.09, "ε, the acceptance bar where the target is unsure (Medusa: 0.09)")
    posterior_alpha: float = param(0.3, "δ, scales exp(−H) (Medusa: √ε = 0.3)")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma")
        check_typical(self)


def check_typical(params) -> None:
    """ConfigError unless ε (``posterior_threshold``) is in [0, 1] and δ (``posterior_alpha``) >= 0."""
    if not (0.0 <= params.posterior_threshold <= 1.0 and params.posterior_alpha >= 0.0):
        raise ConfigError(f"need posterior_threshold ε in [0, 1] and posterior_alpha δ >= 0, got "
                          f"{params.posterior_threshold}, {params.posterior_alpha}")


Params = TypicalParams
