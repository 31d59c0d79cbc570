"""``mtjd``'s keys (γ per joint step, beams)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SamplingParams, param


@dataclass(frozen=True)
class MTJDParams(SamplingParams):
    gamma: int = param(4, "tokens per joint step γ_i (App. C.1: 4)")
    width: int = param(4, "beams W of the target's beam decoding")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma", "width")

    @property
    def lookahead(self) -> int:
        return self.gamma + 1


Params = MTJDParams
