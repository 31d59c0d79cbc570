"""``bild``'s keys (τ1, τ2)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SpeculativeParams, param
from harness.errors import ConfigError


@dataclass(frozen=True)
class BiLDParams(SpeculativeParams):
    gamma: int = param(10, "most draft tokens per round (Table 15: 10)")
    fallback_threshold: float = param(0.9, "τ1 on the draft's confidence (Table 15: 0.3, 0.9)")
    rollback_threshold: float = param(2.0, "τ2 on the target's NLL in nats (Table 15: 1, 2, 3)")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma")
        if not 0.0 <= self.fallback_threshold <= 1.0:
            raise ConfigError(f"fallback_threshold (τ1) must be in [0, 1], got {self.fallback_threshold}")
        if self.rollback_threshold < 0:
            raise ConfigError(f"rollback_threshold (τ2) must be >= 0, got {self.rollback_threshold}")


Params = BiLDParams
