"""``medusa_typical``'s keys (Medusa's tree, typical acceptance's ε and δ)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import param
from harness.decoders.params.medusa import MedusaParams
from harness.decoders.params.typical import check_typical


@dataclass(frozen=True)
class MedusaTypicalParams(MedusaParams):
    posterior_threshold: float = param(0.09, "ε, the acceptance bar where the target is unsure (Medusa: 0.09)")
    posterior_alpha: float = param(0.3, "δ, scales exp(−H) (Medusa: √ε = 0.3)")

    def __post_init__(self):
        super().__post_init__()
        check_typical(self)


Params = MedusaTypicalParams
