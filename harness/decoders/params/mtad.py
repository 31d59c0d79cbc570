"""``mtad``'s keys (γ, draft beams, τ)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SpeculativeParams, param
from harness.errors import ConfigError


@dataclass(frozen=True)
class MTADParams(SpeculativeParams):
    gamma: int = param(4, "draft length γ (Table 15: 4)")
    draft_width: int = param(8, "beams of the draft's beam sampling (Table 15: 8)")
    tau: float = param(0.1, "acceptance threshold τ in [0, 1] (Table 15: 0.1, 0.9); 1 rejects every draft")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma", "draft_width")
        if not 0.0 <= self.tau <= 1.0:
            raise ConfigError(f"tau must be in [0, 1], got {self.tau}")
        self.require_sampling("mtad", "samples its draft beams")


Params = MTADParams
