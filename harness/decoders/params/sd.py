"""``sd``'s keys (γ)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SpeculativeParams, param


@dataclass(frozen=True)
class SDParams(SpeculativeParams):
    gamma: int = param(4, "draft length γ per round (mtad Table 15: 4)")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma")


Params = SDParams
