"""``beam_search``'s keys (HF generate(num_beams=W)'s)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import DecoderParams, param
from harness.errors import ConfigError


@dataclass(frozen=True)
class BeamSearchParams(DecoderParams):
    width: int = param(4, "beams W of the search")
    length_penalty: float = param(1.0, "finished hypotheses score sum log p / length^length_penalty (HF)")
    early_stopping: bool | str = param(False, "true, false or 'never', as in HF generate")

    def __post_init__(self):
        self.check_at_least(1, "width")
        if self.early_stopping not in (True, False, "never"):
            raise ConfigError(f"early_stopping must be true, false or 'never', got {self.early_stopping!r}")


Params = BeamSearchParams
