"""Generation statistics: one meaning per statistic for every method, and each ratio defined once.

Counts (per generation; a cell sums them over its prompts):

============================  ==================================================================
``new_tokens``                tokens generated (prompt excluded)
``target_calls``              target forward calls (:class:`~harness.primitives.forward.CountedModel`)
``draft_calls``               draft forward calls
``wall_time_s``               wall time of the whole generation (device-synchronised)
``rounds``                    draft→verify iterations (0 for methods without drafting)
``draft_positions``           Σ over rounds of γ_r, the draft depth of the round (chain length;
                              tree depth; DSBD layers)
``draft_nodes``               Σ over rounds of every token the draft proposed (all tree nodes;
                              DSBD: W_S·γ_r draft beams)
``accepted_tokens``           Σ over rounds of draft tokens committed (on the accepted path; DSBD
                              layers passed)
``rejected_rounds``           rounds that stopped before their γ_r (the MLE of a chain's α is
                              accepted ÷ (accepted + rejected_rounds))
``accept_lengths``            per round: tokens committed that round (accepted + 1), as Spec-Bench
``round_gammas``              per round: γ_r
``draft_time_s``              Σ host time drafting (NaN where not measured)
``verify_time_s``             Σ host time of target verification, acceptance and rollback
``prefill_time_s``            time of the forward calls that encode the prompt (each model's first
                              call of the generation; a speculative method's first target call
                              also verifies its first drafts). NaN where the models are not called
                              through :class:`~harness.primitives.forward.CountedModel` (HF assisted)
``decode_time_s``             wall_time_s − prefill_time_s
``rest_time_s``               wall_time_s − draft_time_s − verify_time_s: host work outside drafting
                              and verification (NaN where those are not measured)
============================  ==================================================================

All times are host ``time.perf_counter`` spans; on a GPU they cover the device's work only with
``runner.breakdown=true`` (device synchronisation at every boundary), see the README.

Ratios (:func:`ratios`; the per-record values and the cell summary both come from it, the cell's
being ratios of totals, i.e. pooled over every round of every prompt):

* ``tokens_per_s`` = new_tokens ÷ wall_time_s
* ``block_efficiency`` = new_tokens ÷ target_calls (MTAD code)
* ``acceptance_rate`` = accepted_tokens ÷ draft_positions (vLLM's draft acceptance rate, for chains)
* ``node_acceptance_rate`` = accepted_tokens ÷ draft_nodes
* ``mean_acceptance_length`` = Σ accept_lengths ÷ rounds (Spec-Bench's MAT, pooled over rounds)

Method-specific extras are a small dataclass a decoder declares (``Decoder.Extras``); they are
recorded as ``stat.<field>``.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from harness.primitives.round import Round

NAN = float("nan")

#: The counts that add up over prompts (a cell's totals are their sums).
COUNT_FIELDS = ("new_tokens", "target_calls", "draft_calls", "wall_time_s", "rounds", "draft_positions",
                "draft_nodes", "accepted_tokens", "rejected_rounds", "draft_time_s", "verify_time_s",
                "prefill_time_s", "decode_time_s", "rest_time_s")
#: Times that may be unmeasured (NaN): a cell's total is NaN unless every prompt has one.
MAYBE_TIMES = ("draft_time_s", "verify_time_s", "prefill_time_s", "decode_time_s", "rest_time_s")
#: Per-round lists.
ROUND_FIELDS = ("accept_lengths", "round_gammas")
#: name -> (numerator, denominator) of every ratio; ``committed_tokens`` = Σ accept_lengths.
RATIO_DEFINITIONS: dict[str, tuple[str, str]] = {
    "tokens_per_s": ("new_tokens", "wall_time_s"),
    "block_efficiency": ("new_tokens", "target_calls"),
    "acceptance_rate": ("accepted_tokens", "draft_positions"),
    "node_acceptance_rate": ("accepted_tokens", "draft_nodes"),
    "mean_acceptance_length": ("committed_tokens", "rounds"),
}


def _ratio(num: float | None, den: float | None) -> float:
    if num is None or den is None or not den or (isinstance(den, float) and math.isnan(den)):
        return NAN
    return num / den


def ratios(totals: Mapping[str, float]) -> dict[str, float]:
    """Every ratio of :data:`RATIO_DEFINITIONS` from counts (``committed_tokens`` = Σ accept_lengths).

    NaN where the denominator is 0 (e.g. acceptance of a method that never drafts).
    """
    return {name: _ratio(totals.get(num), totals.get(den)) for name, (num, den) in RATIO_DEFINITIONS.items()}


def _finite_sum(values) -> float:
    """Σ of the values; NaN if any is NaN/None (a time that was not measured everywhere is not measured)."""
    total = 0.0
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return NAN
        total += v
    return total


def pooled_totals(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """A cell's totals from its records: counts summed, ``committed_tokens`` = Σ of every accept length.

    Records of older result folders are read under the current names (:mod:`harness.config.legacy`).
    """
    totals: dict[str, float] = {}
    for key in COUNT_FIELDS:
        values = [r.get(key, 0) for r in records]
        if key in MAYBE_TIMES:
            totals[key] = _finite_sum(values) if records else NAN
        else:
            totals[key] = sum(v or 0 for v in values)
    totals["committed_tokens"] = sum(sum(r.get("accept_lengths") or []) for r in records)
    return totals



@dataclass
class NoExtras:
    """A decoder without method-specific statistics."""


@dataclass
class GenerationStats:
    """What one generation cost, and (for methods that draft) what drafting bought. See the module docstring.

    Rounds are recorded only through :meth:`observe_round`, called by the loop drivers; the base
    decoder sets the call counts and the wall time; the decoder's declared extras arrive in ``extras``.
    """

    new_tokens: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    wall_time_s: float = 0.0
    rounds: int = 0
    draft_positions: int = 0
    draft_nodes: int = 0
    accepted_tokens: int = 0
    rejected_rounds: int = 0
    accept_lengths: list[int] = field(default_factory=list)
    round_gammas: list[int] = field(default_factory=list)
    draft_time_s: float = NAN
    verify_time_s: float = NAN
    prefill_time_s: float = NAN
    extras: Any = field(default_factory=NoExtras)
    #: perf_counter spans of the generation, for energy attribution (not recorded): "generation" [(start, end)],
    #: "prefill" (each model's first call), "target" and "draft" (every forward call of each model)
    spans: dict = field(default_factory=dict, repr=False)

    @property
    def decode_time_s(self) -> float:
        return self.wall_time_s - self.prefill_time_s

    @property
    def rest_time_s(self) -> float:
        return self.wall_time_s - self.draft_time_s - self.verify_time_s

    def set_spans(self, start: float, end: float, model_spans: dict[str, list[tuple[float, float]]]) -> None:
        """The generation's span and its models' forward-call spans (set by the base decoder):
        ``prefill_time_s`` from each model's first call."""
        prefill = [calls[0] for calls in model_spans.values() if calls]
        self.spans = {"generation": [(start, end)], "prefill": prefill, **model_spans}
        if model_spans.get("target"):
            self.prefill_time_s = sum(b - a for a, b in prefill)

    def observe_round(self, obs: Round) -> None:
        """Record one finished draft→verify round (the only way rounds enter the statistics)."""
        self.rounds += 1
        self.draft_positions += obs.gamma
        self.draft_nodes += obs.draft_nodes
        self.accepted_tokens += obs.accepted
        self.rejected_rounds += int(obs.accepted < obs.gamma)
        self.accept_lengths.append(len(obs.committed))
        self.round_gammas.append(obs.gamma)
        first = self.rounds == 1
        self.draft_time_s = obs.draft_time_s if first else self.draft_time_s + obs.draft_time_s
        self.verify_time_s = obs.verify_time_s if first else self.verify_time_s + obs.verify_time_s

    def totals(self) -> dict[str, float]:
        out = {k: getattr(self, k) for k in COUNT_FIELDS}
        out["committed_tokens"] = sum(self.accept_lengths)
        return out

    def ratios(self) -> dict[str, float]:
        return ratios(self.totals())

    @property
    def tokens_per_s(self) -> float:
        return self.ratios()["tokens_per_s"]

    @property
    def block_efficiency(self) -> float:
        return self.ratios()["block_efficiency"]

    @property
    def acceptance_rate(self) -> float:
        return self.ratios()["acceptance_rate"]

    @property
    def node_acceptance_rate(self) -> float:
        return self.ratios()["node_acceptance_rate"]

    @property
    def mean_acceptance_length(self) -> float:
        return self.ratios()["mean_acceptance_length"]

    def extras_record(self) -> dict[str, Any]:
        """The declared extras as ``stat.<field>`` record entries."""
        if not dataclasses.is_dataclass(self.extras):
            return {}
        return {f"stat.{f.name}": getattr(self.extras, f.name) for f in dataclasses.fields(self.extras)}

    def as_record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {k: getattr(self, k) for k in COUNT_FIELDS}
        rec["accept_lengths"] = list(self.accept_lengths)
        rec["round_gammas"] = list(self.round_gammas)
        rec.update(self.ratios())
        rec.update(self.extras_record())
        return rec
