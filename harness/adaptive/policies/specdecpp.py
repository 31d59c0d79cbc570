"""``specdecpp``: SpecDec++ (Huang et al. 2024, arXiv:2405.19715) — the draft stops inside the round once the
predicted probability of a rejection passes a threshold (the adaptive paper's Table 4 baseline).

An acceptance head on the DRAFT's last hidden state predicts p̂ that the target accepts each candidate
(:mod:`harness.heads.specdecpp`). In the reference's order, the draft forward that reads candidate k yields p̂_k
and the distribution candidate k + 1 is drawn from; candidate k + 1 is drawn, then drafting stops iff
1 − ∏_{j ≤ k} p̂_j > ``threshold``, within [``gamma_min``, ``gamma_max``] candidates (the newest candidate is never
judged, and stopping costs no forward): the template's per-turn stop hook with ``draws_one_more``. The round's
depth is a stopping time of what has been drawn, so the output is exactly the target's (the γ policy never
changes the distribution). ``next_gamma`` is ``gamma_max``, the round's bound.

The threshold's default is the reference's (README benchmark: ``--stop_threshold 0.3 --bound 2 20``; the bounds
are the project's γ range, set [2, 20] for the reference's); the embedded
``tiny/specdecpp`` head (3 layers on tiny/draft) was trained under ``decoding=sampling``. It is below the free
baseline q(x) on the tiny pair and calibrated low (the reference's 6× weight on rejections), so h = 0.3 nearly
always stops at gamma_min there: sweep the threshold. The head's calls are timed as drafting, not counted as
draft calls (``draft_calls`` stays the draft model's forwards).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from harness.adaptive.policies.base import BoundedParams, register_policy
from harness.errors import ConfigError
from harness.heads.defaults import DEFAULT_THRESHOLD
from harness.params import param
from harness.primitives.gamma_policy import GammaPolicy
from harness.primitives.warping import Warp

if TYPE_CHECKING:  # the head's modules (torch) load with the policy, not with the config (harness --help)
    import torch

    from harness.heads.specdecpp import SpecDecPPStop


@dataclass
class SpecDecPPHook:
    """The per-turn stop hook (:class:`~harness.primitives.drafting.DraftStop`) of one generation."""

    rule: SpecDecPPStop
    ref: str
    needs_hidden: ClassVar[bool] = True
    draws_one_more: ClassVar[bool] = True  # candidate d + 1 is drawn from the logits at hand, then the round ends

    def __call__(self, depth: int, hidden: torch.Tensor, logits: torch.Tensor) -> bool:
        head = self.rule.head
        if hidden.size(-1) != head.hidden_size:
            raise ConfigError(f"gamma_policy.head={self.ref}: the acceptance head reads draft hidden states of size "
                              f"{head.hidden_size}, this draft's are {hidden.size(-1)}")
        if depth == 1:  # a new round: the first forward read the last verified token, which is no candidate
            if next(head.parameters()).device != hidden.device:
                head.to(hidden.device)
            self.rule.reset()
            self.rule.after_draft(hidden)
        return self.rule.after_draft(hidden)  # candidate depth + 1 drawn; p̂ of candidates 1 … depth


class SpecDecPPPolicy(GammaPolicy):
    """Rounds up to ``gamma_max`` deep, ended by the acceptance head's stop rule (module doc)."""

    name = "specdecpp"

    def __init__(self, params: SpecDecPPParams, depth_cap: int | None = None):
        self.params = params
        self.gamma_max = params.gamma_max if depth_cap is None else max(1, min(params.gamma_max, depth_cap))
        self.gamma_min = max(1, min(params.gamma_min, self.gamma_max))
        from harness.heads.checkpoints import read_config
        from harness.heads.specdecpp import load_acceptance_head

        self.head = load_acceptance_head(params.head)
        self.trained_under = read_config(params.head).get("decoding")

    def next_gamma(self) -> int:
        return self.gamma_max

    def draft_stop(self, warp: Warp) -> SpecDecPPHook:
        """The stop hook of one generation under ``warp`` (warns when the head was trained under another decoding)."""
        decoding = "greedy" if warp.is_greedy else "sampling"
        if self.trained_under not in (None, decoding):
            warnings.warn(f"gamma_policy.head={self.params.head} was trained under decoding={self.trained_under}, "
                          f"this cell decodes {decoding}: its predictions are off (still lossless)", stacklevel=2)
            self.trained_under = None  # once per policy
        from harness.heads.specdecpp import SpecDecPPStop

        rule = SpecDecPPStop(self.head, self.params.threshold, self.gamma_min, self.gamma_max)
        return SpecDecPPHook(rule, self.params.head)

    def __repr__(self) -> str:
        return f"SpecDecPPPolicy({self.params})"


@register_policy
@dataclass(frozen=True)
class SpecDecPPParams(BoundedParams):
    """SpecDec++'s stop rule. ``gamma_min``/``gamma_max`` bound the candidates per round (the project's one
    default, [1, 8]; the reference's benchmark bound is [2, 20]: ``gamma_policy.gamma_min=2 gamma_policy.gamma_max=20``;
    a gamma_min of 0 means 1 here: a round drafts at least one candidate)."""

    name = "specdecpp"
    Policy: ClassVar[type] = SpecDecPPPolicy
    stops_drafting: ClassVar[bool] = True  # decides inside the round: for methods whose draft is a chain (sd)

    head: str = param("tiny/specdecpp", "acceptance head: tiny/specdecpp (embedded, on tiny/draft), a directory or "
                                        "a hub id (hacky/acchead-* layout)")
    threshold: float = param(DEFAULT_THRESHOLD, "stop once the predicted P(some candidate is rejected) exceeds it "
                                                "(SpecDec++: 0.3)")

    def __post_init__(self):
        super().__post_init__()
        self.check("threshold", isinstance(self.threshold, (int, float)) and 0.0 <= self.threshold <= 1.0, "[0, 1]")
        self.check("head", isinstance(self.head, str) and bool(self.head), "tiny/specdecpp, a directory or a hub id")

    def build(self, gamma: int = 0, depth_cap: int | None = None) -> GammaPolicy:
        return SpecDecPPPolicy(self, depth_cap)
