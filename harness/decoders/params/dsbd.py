"""``dsbd``'s keys (W_S, γ, t, W_min, W_L)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SamplingParams, param
from harness.errors import ConfigError


@dataclass(frozen=True)
class DSBDParams(SamplingParams):
    draft_width: int = param(4, "W_S: beams of the draft's beam sampling (§4: 2..6)")
    gamma: int = param(3, "γ: draft layers per round (§4: 2, 3)")
    threshold: float = param(0.9, "t of Eq. 7 (§4: 0.7, 0.9)")
    min_width: int = param(1, "W_min of Eq. 6 (§4: 1, 2, 3)")
    width: int | None = param(None, "fixed W_L (§3.1); null = dynamic width (§3.2, Eq. 6-7)")
    memory_constrained: bool = param(False, "§3.4: only the lowest-perplexity output beam continues")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "draft_width", "gamma", "min_width")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"threshold t must be in [0, 1], got {self.threshold}")
        if self.width is not None and self.width < 1:
            raise ConfigError(f"width must be >= 1 or null (dynamic width), got {self.width}")
        self.require_sampling("dsbd", "samples beams")

    @property
    def lookahead(self) -> int:
        return self.gamma + 1


Params = DSBDParams
