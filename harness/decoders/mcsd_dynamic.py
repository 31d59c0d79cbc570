"""Dynamic multi-candidate speculative decoding with fork-shaped trees (mcsd §3.2-3.3, Fig. 2, App. A.1).

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
adaptive §4; the masks are built for an adaptive policy's γ_max). Draft selection is not supported here
(the decision model reads one draft's hidden states). Extras: ``early_stops``
(rounds the decision model ended before their depth), ``decision_checks`` (evaluations of the rule).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from harness.decoders.base import register
from harness.decoders.decision_model import EarlyStopRule, decision_rule
from harness.decoders.params.mcsd_dynamic import DynamicParams, EarlyStopParams
from harness.decoders.speculative import SpeculativeDecoder
from harness.primitives.acceptance import multi_step_select_without_replacement
from harness.primitives.multi_candidate import TreeMasks
from harness.primitives.spec_loop import TreeWalk
from harness.primitives.tree_attention import fork_parents


def stop_rule(params: EarlyStopParams, pair, draft) -> EarlyStopRule | None:
    """The decision model's stop hook for ``pair``'s draft (None without one): ``params``' decision keys."""
    return decision_rule(params.decision_model, params.decision_threshold, params.warp, pair, draft)


@dataclass
class EarlyStopExtras:
    early_stops: int = 0  # rounds the decision model ended before their depth
    decision_checks: int = 0  # evaluations of the early-stop rule
    # per round, the largest predicted acceptance over the sequences at each check d = 1, 2, … (mcsd Fig. 7);
    # the token check d judges is draft level d + decision_lookahead (0: T1, the token just drafted; 1: T2)
    decision_predictions: list = field(default_factory=list)
    decision_lookahead: int | None = None

    @classmethod
    def of(cls, stop: EarlyStopRule | None, **more) -> EarlyStopExtras:
        """The extras of a generation drafted with ``stop`` (None: no decision model)."""
        if stop is None:
            return cls(**more)
        model = getattr(stop, "model", None)  # any DraftStop may stand in (tests): what it keeps is recorded
        return cls(stop.stops, stop.checks, [list(p) for p in getattr(stop, "predictions", [])],
                   getattr(model, "lookahead", None), **more)


def begin_round(stop) -> None:
    """Open a drafting round's list of decision-model predictions (a stop hook without one: nothing)."""
    if stop is not None and hasattr(stop, "new_round"):
        stop.new_round()


@register
class MCSDDynamic(SpeculativeDecoder[DynamicParams]):
    method = "mcsd_dynamic"
    in_default_sweep = False  # the mcsd paper's variants run in its experiment (mcsd_tables)
    lossless = True
    supports_draft_selection = False  # the decision model reads one draft's hidden states
    Extras = EarlyStopExtras
    accept = TreeWalk(multi_step_select_without_replacement)

    def __init__(self, pair, params=None, **kwargs):
        super().__init__(pair, params, **kwargs)
        self.stop = stop_rule(self.params, pair, self.draft)
        # masks for the deepest round: D, or an adaptive policy's γ_max (adaptive App. C.4)
        depth = max(self.params.gamma, int(getattr(self.gamma_policy, "gamma_max", 0) or 0))
        self.masks = TreeMasks.for_parents(fork_parents(self.params.num_drafts, depth), self.target, self.draft)
        self.verify_mask = self.masks.target

    def begin(self, spec):
        if self.stop is not None:
            self.stop.reset()

    def propose(self, spec, depth):
        begin_round(self.stop)
        widths = [self.params.num_drafts] + [1] * (depth - 1) if depth else []
        return spec.draft_tree(widths, replacement=False, masks=self.masks.draft, stop=self.stop)

    def extras(self, spec):
        return EarlyStopExtras.of(self.stop)

    def facts(self) -> dict:
        if self.stop is None:
            return {}
        info = self.stop.model.info
        return {"decision_model": info.get("name"), "decision_model_kind": self.stop.model.kind,
                "decision_model_temperature": info.get("temperature")}
