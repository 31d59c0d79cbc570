"""Dynamic multi-candidate speculative decoding with fork-shaped trees (seed 003 §3.2-3.3, Fig. 2, App. A.1).

The draft proposes W = ``num_drafts`` candidate sequences that fork at the first token and never
branch again (a fork-shaped tree (W, 1, …, 1): §3.2 — its mask grows linearly in the depth, where an
expanding tree's grows exponentially), up to depth D = ``gamma`` (§4.1: D = 5, W = 16). The W heads
are drawn without replacement (MCSD), the chains below them one token each, one draft forward per
turn. After each turn d < D a decision model (§3.3; ``decision_model``) predicts, for every sequence,
whether the target accepts its latest (T1) or next (T2) token; when all W predictions are below β =
``decision_threshold`` (0.4, §3.3), drafting stops and the round's depth is γ = d (Fig. 2). The target
verifies the tree in ONE forward with the topology-aware mask sliced from the one built for depth D
(the dynamic sliced mask of §3.2; :class:`~harness.primitives.tree.SlicedTreeMask`), and MCSD's
selection rule (Yang et al. 2024 Alg. 2) walks it. The decision model only chooses γ, from what
has been drawn, never the acceptance rule: the output is distributed exactly as the target's (and
is its greedy output under temperature 0, where the heads are the draft's top-W tokens).

The paper's full framework starts the fork from the target instead (§3.1 + §3.2: n_t = W
target-sampled heads, lossy for W ≥ 2): that is ``mcsd_target_init`` with ``k_config`` (W, 1, …, 1)
and the same ``decision_model`` keys.

The realised γ of each round is what the statistics record (``round_gammas``, ``draft_positions``)
and what a γ policy observes; the policy's γ is the round's maximum depth D (``method.gamma_policy``,
seed 004 §4; the masks are built for an adaptive policy's γ_max). Draft selection is not supported here
(the decision model reads one draft's hidden states). Extras: ``early_stops``
(rounds the decision model ended before their depth), ``decision_checks`` (evaluations of the rule).
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.decoders.base import Decoded, Decoder, SpeculativeParams, param, register
from harness.errors import ConfigError
from harness.primitives.decision_model import (DEFAULT_THRESHOLD, DecisionModel, EarlyStopRule,
                                               available_decision_models, check_threshold)
from harness.primitives.multi_candidate import TreeMasks, multi_candidate_step
from harness.primitives.spec_loop import speculative_loop
from harness.primitives.spec_state import SpeculativeCaches
from harness.primitives.tree import fork_parents

#: ``decision_model: t1 | t2`` means the committed model of that kind for the embedded tiny draft at the
#: decoding's temperature: ``tiny_<kind>_temp<T>`` (scripts/train_decision_models.py).
KIND_SHORTHANDS = ("t1", "t2")
TINY_DRAFT = "tiny/draft"


@dataclass(frozen=True)
class EarlyStopParams(SpeculativeParams):
    """The decision-model keys of seed 003's dynamic drafting, shared by ``mcsd_dynamic`` and ``mcsd_target_init``."""

    decision_model: str | None = param(None, "early-stop decision model (seed 003 §3.3): null = none (fixed depth); "
                                             "t1 | t2 = the tiny draft's model of that kind at this temperature; "
                                             "or a name in harness/assets/decision_models, or a path")
    decision_threshold: float = param(DEFAULT_THRESHOLD, "β: stop drafting when every sequence's predicted "
                                                         "acceptance is below it (seed 003 §3.3: 0.4)")

    def __post_init__(self):
        super().__post_init__()
        check_threshold(self.decision_threshold)


def decision_rule(params: EarlyStopParams, pair, draft) -> EarlyStopRule | None:
    """The stop hook for ``params.decision_model`` (None when it is null), loaded on the draft's device."""
    name = params.decision_model
    if name is None:
        return None
    if name in KIND_SHORTHANDS:
        if pair.draft_id != TINY_DRAFT:
            raise ConfigError(f"decision_model={name} names the committed model for draft '{TINY_DRAFT}', but the "
                              f"pair's draft is '{pair.draft_id}': give a model name or path "
                              f"(available: {', '.join(available_decision_models())})")
        name = f"tiny_{name}_temp{params.temperature:g}"
    model = DecisionModel.load(name, device=draft.device)
    if model.kind == "t1" and model.in_features != draft.config.hidden_size:
        raise ConfigError(f"decision_model '{name}' (t1) reads hidden states of width {model.in_features}, but the "
                          f"draft's hidden size is {draft.config.hidden_size}")
    return EarlyStopRule(model, params.decision_threshold, params.warp)


@dataclass(frozen=True)
class DynamicParams(EarlyStopParams):
    gamma: int = param(5, "D: maximum draft depth per round (seed 003 §4.1: 5); the decision model may stop earlier")
    num_drafts: int = param(16, "W: candidate sequences of the fork (seed 003 §4.1: 16)")

    def __post_init__(self):
        super().__post_init__()
        self.check_at_least(1, "gamma", "num_drafts")


@dataclass
class EarlyStopExtras:
    early_stops: int = 0  # rounds the decision model ended before their depth
    decision_checks: int = 0  # evaluations of the early-stop rule


@register
class MCSDDynamic(Decoder[DynamicParams]):
    method = "mcsd_dynamic"
    uses_draft = True
    uses_gamma_policy = True
    Extras = EarlyStopExtras

    def __init__(self, pair, params=None, **kwargs):
        super().__init__(pair, params, **kwargs)
        self.stop = decision_rule(self.params, pair, self.draft)
        # masks for the deepest round: D, or an adaptive policy's γ_max (seed 004 App. C.4)
        depth = max(self.params.gamma, int(getattr(self.gamma_policy, "gamma_max", 0) or 0))
        self.masks = TreeMasks.for_parents(fork_parents(self.params.num_drafts, depth), self.target, self.draft)

    def _decode(self, prompt_ids, max_new_tokens, generator, stats) -> Decoded:
        warp, w = self.params.warp, self.params.num_drafts
        caches = SpeculativeCaches(self.target, self.draft, prompt_ids, self.sync_timing)
        if self.stop is not None:
            self.stop.reset()

        def step(depth):
            widths = [w] + [1] * (depth - 1) if depth else []
            return multi_candidate_step(self.target, self.draft, caches, widths, warp, generator, masks=self.masks,
                                        stop=self.stop)

        tokens = speculative_loop(step, self.gamma_policy, prompt_ids[0].tolist(), max_new_tokens,
                                  self.stopping, stats)
        extras = EarlyStopExtras(*(self.stop.stops, self.stop.checks) if self.stop is not None else ())
        return Decoded(tokens, extras)

    def facts(self) -> dict:
        if self.stop is None:
            return {}
        info = self.stop.model.info
        return {"decision_model": info.get("name"), "decision_model_kind": self.stop.model.kind,
                "decision_model_temperature": info.get("temperature")}
