"""``pld``'s keys (HF's prompt lookup's)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SpeculativeParams, param


@dataclass(frozen=True)
class PLDParams(SpeculativeParams):
    prompt_lookup_num_tokens: int = param(10, "most tokens copied after a match per round (HF's "
                                              "prompt_lookup_num_tokens; HF's example and the PLD repo: 10)")
    max_matching_ngram_size: int = param(2, "largest n-gram matched; sizes tried from it down to 1 (HF's "
                                            "max_matching_ngram_size; HF default 2)")

    @property
    def gamma(self) -> int:
        return self.prompt_lookup_num_tokens

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "prompt_lookup_num_tokens", "max_matching_ngram_size")


Params = PLDParams
