"""``hf_heuristic``: HF transformers' ``num_assistant_tokens_schedule="heuristic"`` as a γ policy (a peer baseline)."""
from __future__ import annotations

from dataclasses import dataclass

from harness.adaptive.policies.base import BoundedParams, BoundedPolicy, register_policy
from harness.params import param
from harness.primitives.round import Round


class HFHeuristicPolicy(BoundedPolicy):
    """+2 after a fully accepted round, −1 otherwise.

    Checked against ``AssistedCandidateGenerator.update_candidate_strategy`` in
    ``transformers/generation/candidate_generator.py`` of transformers 5.23.0: after a round,
    if the number of matches equals the number of candidates drafted, ``num_assistant_tokens``
    += 2, else ``num_assistant_tokens = max(1, num_assistant_tokens − 1)``. With "heuristic" the
    value persists across ``generate`` calls (it is written back to the assistant's generation
    config); "heuristic_transient" restarts from the initial value each call (``transient=true``).

    Differences, by design: HF has no upper bound (only the remaining length clips a round);
    here γ saturates at γ_max (a large ``gamma_max`` reproduces HF) and at γ_min (HF's floor is 1,
    our default γ_min). γ_init (the decoder's ``gamma``, 4 for ``sd`` as for ``hf_assisted``)
    stands for ``num_assistant_tokens`` (HF 5.x default 20, schedule "constant").
    """

    params: HFHeuristicParams

    def reset(self, prompt_ids: list[int]) -> None:
        if self.params.transient:
            super().reset(prompt_ids)

    def observe(self, obs: Round) -> None:
        self.gamma = self.clip(self.gamma + 2 if obs.accepted >= obs.gamma else self.gamma - 1)


@register_policy
@dataclass(frozen=True)
class HFHeuristicParams(BoundedParams):
    name = "hf_heuristic"
    Policy = HFHeuristicPolicy

    transient: bool = param(False, "restart from γ every generation (HF's heuristic_transient)")

    def __post_init__(self):
        super().__post_init__()
        self.check("transient", isinstance(self.transient, bool), "true | false")
