"""``specinfer``'s keys (γ, m drafts); ``spectr`` shares them."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import param
from harness.decoders.params.sd import SDParams


@dataclass(frozen=True)
class MultiDraftParams(SDParams):
    num_drafts: int = param(2, "draft sequences m (mtad Table 15: 2 or 4; 2 in 7 of its 10 settings)")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "num_drafts")


Params = MultiDraftParams
