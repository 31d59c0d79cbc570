"""``hf_assisted``'s keys (HF's assistant schedule, prompt lookup)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SamplingParams, param
from harness.errors import ConfigError


SCHEDULES = ("constant", "heuristic", "heuristic_transient")


@dataclass(frozen=True)
class HFAssistedParams(SamplingParams):
    gamma: int = param(4, "num_assistant_tokens: draft tokens per round (the initial value for heuristic schedules)")
    schedule: str = param("constant", f"num_assistant_tokens_schedule: {', '.join(SCHEDULES)}")
    confidence_threshold: float = param(0.0, "assistant_confidence_threshold; 0 = off (HF 5.x default: 0.4)")
    prompt_lookup_num_tokens: int | None = param(None, "HF's prompt lookup instead of the draft: most candidate "
                                                       "tokens per round; null = off (the assistant model)")
    max_matching_ngram_size: int | None = param(None, "prompt lookup's largest n-gram; null = HF's default (2)")

    @property
    def lookahead(self) -> int:
        return (self.gamma if self.prompt_lookup_num_tokens is None else self.prompt_lookup_num_tokens) + 1

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma")
        if self.schedule not in SCHEDULES:
            raise ConfigError(f"unknown schedule '{self.schedule}'; valid: {', '.join(SCHEDULES)}")
        if not 0.0 <= self.confidence_threshold < 1.0:
            raise ConfigError(f"confidence_threshold must be in [0, 1), got {self.confidence_threshold}")
        for key in ("prompt_lookup_num_tokens", "max_matching_ngram_size"):
            if getattr(self, key) is not None:
                self.check_at_least(1, key)
        if self.max_matching_ngram_size is not None and self.prompt_lookup_num_tokens is None:
            raise ConfigError("max_matching_ngram_size applies to prompt lookup only: set prompt_lookup_num_tokens")


Params = HFAssistedParams
