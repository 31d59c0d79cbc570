"""``beam_sampling``'s keys."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SamplingParams, param


@dataclass(frozen=True)
class BeamSamplingParams(SamplingParams):
    width: int = param(4, "beams W drawn i.i.d. from T∘p_beam each step")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "width")
        self.require_sampling("beam_sampling", "draws beams (for deterministic beams use method=beam_search)")


Params = BeamSamplingParams
