"""``mcsd_dynamic``'s keys (depth D, W sequences) and the early-stop decision model's, shared with
``mcsd_target_init``; the threshold β's default and check (:mod:`harness.decoders.decision_model` uses them)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.params import SpeculativeParams, param
from harness.errors import ConfigError

DEFAULT_THRESHOLD = 0.4  # β (mcsd §3.3: "the threshold is 0.4 for both decision models"; Fig. 2)


def check_threshold(threshold: float) -> float:
    if not 0.0 <= float(threshold) <= 1.0:
        raise ConfigError(f"decision threshold must be in [0, 1] (mcsd uses 0.4), got {threshold}")
    return float(threshold)


@dataclass(frozen=True)
class EarlyStopParams(SpeculativeParams):
    """The decision-model keys of the mcsd paper's dynamic drafting, shared by ``mcsd_dynamic`` and
    ``mcsd_target_init``."""

    decision_model: str | None = param(None, "early-stop decision model (mcsd §3.3): null = none (fixed depth); "
                                             "t1 | t2 = the tiny draft's model of that kind at this temperature; "
                                             "or a name in harness/assets/decision_models, or a path")
    decision_threshold: float = param(DEFAULT_THRESHOLD, "β: stop drafting when every sequence's predicted "
                                                         "acceptance is below it (mcsd §3.3: 0.4)")

    def __post_init__(self):
        super().__post_init__()
        check_threshold(self.decision_threshold)


@dataclass(frozen=True)
class DynamicParams(EarlyStopParams):
    gamma: int = param(5, "D: maximum draft depth per round (mcsd §4.1: 5); the decision model may stop earlier")
    num_drafts: int = param(16, "W: candidate sequences of the fork (mcsd §4.1: 16)")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma", "num_drafts")


Params = DynamicParams
