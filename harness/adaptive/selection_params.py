"""The ``draft_selection`` group's nodes (adaptive §5), torch- and numpy-free: ``ols``'s keys and their defaults, and
``none``. The selection itself is :mod:`harness.selection` (with :mod:`harness.adaptive.draft_selection`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from harness.params import Params, is_int, param

N_FIT = 25          # prompts used to fit Eq. 8 per draft (§6.1: "25 prompts in online predictive model construction")
DIM = 8             # vector length r (App. C.5 Table 11: 4..16 all within 2 %)


@dataclass(frozen=True)
class SelectionParams(Params):
    """``draft_selection=ols``: Eq. 8's OLS per draft on prompt features, Theorem 2 / Eq. 1's choice (adaptive §5)."""

    name: ClassVar[str] = "ols"

    fit_prompts: int = param(N_FIT, "prompts run with every draft to fit Eq. 8 (adaptive §6.1: 25)")
    features: int = param(DIM, "feature vector length r (adaptive App. C.5 Table 11: 4..16)")

    def describe_group(self) -> str:
        return "draft_selection:"

    def __post_init__(self):
        self.check("fit_prompts", is_int(self.fit_prompts) and self.fit_prompts >= 2,
                   "an integer >= 2 (prompts per draft)")
        self.check("features", is_int(self.features) and 3 <= self.features <= 64, "an integer in [3, 64]")


@dataclass(frozen=True)
class NoSelection(Params):
    """``draft_selection=none``: the pair's draft for every prompt (the same as leaving the group unset)."""

    name: ClassVar[str] = "none"


SELECTIONS: dict[str, type[Params]] = {"none": NoSelection, SelectionParams.name: SelectionParams}
