"""The speculative template: a decoder that drafts and verifies in rounds states only how a round drafts and
which rule accepts.

A subclass of :class:`SpeculativeDecoder` gives

* ``propose(spec, depth)`` — the round's draft of ``depth`` levels, a
  :class:`~harness.primitives.spec_state.DraftTree` (verified as drafted) or a
  :class:`~harness.primitives.drafting.Proposal` (e.g. duplicates merged); ``spec``
  (:class:`~harness.primitives.spec_loop.Speculation`) holds the caches, warp and random stream;
* ``accept`` — how the verified round is accepted when sampling: a chain rule
  (:class:`~harness.primitives.spec_loop.ChainAcceptance`) or a selection rule walked down the tree
  (:class:`~harness.primitives.spec_loop.TreeWalk`), the rules in :mod:`harness.primitives.acceptance`;
  ``acceptance(spec)`` where the rule takes the method's parameters. Under greedy decoding every method
  accepts the target's argmax (the rule's ``greedy()`` form);

and, where needed, ``begin(spec)`` (per-generation state), ``extras(spec)`` (its declared ``Extras``),
``verify_mask`` (a sliced mask for the verification forward), ``max_depth()`` and ``reads_target_hidden`` (the
target's hidden states at the verified committed positions, ``spec.hidden``: the trained heads' input,
:mod:`harness.decoders.head_drafting`). The rest is written once:
the γ policy (``gamma_policy`` config group; ``gamma`` is the fixed γ and every adaptive policy's γ_init),
the round (:func:`~harness.primitives.spec_loop.speculative_round`: clock → draft → ONE target forward →
accept → commit both caches), the loop (:func:`~harness.primitives.spec_loop.speculative_loop`) and its
rounds, which the base records. A new speculative method is one file here plus its rule: ``sd``
(:mod:`harness.decoders.sd`) is a chain drafted by ``spec.draft_tree([1] * depth)`` and accepted by
``ChainAcceptance(speculative_sampling)``; ``specinfer`` merges duplicate draws and walks the tree with
``TreeWalk(multi_step_select)``; ``spectr`` is ``specinfer`` with another rule.
"""
from __future__ import annotations

from abc import abstractmethod
from dataclasses import replace
from functools import partial
from typing import Any, ClassVar, Sequence, TypeVar

import torch

from harness.adaptive.columns import policy_columns
from harness.adaptive.policies import PolicyParams
from harness.adaptive.policies.fixed import FixedParams
from harness.decoders.base import DecodeRequest, Decoded, Decoder
from harness.decoders.params import SpeculativeParams
from harness.errors import ConfigError
from harness.models import ModelPair
from harness.primitives.drafting import Proposal
from harness.primitives.gamma_policy import GammaPolicy
from harness.primitives.round import Round
from harness.primitives.spec_loop import Acceptance, Speculation, speculative_loop, speculative_round
from harness.primitives.spec_state import DraftTree
from harness.primitives.tree_attention import SlicedTreeMask


P = TypeVar("P", bound=SpeculativeParams)


class SpeculativeDecoder(Decoder[P]):
    """Template of every draft-then-verify decoder (module docstring)."""

    uses_draft = True
    uses_gamma_policy = True
    supports_draft_selection = True
    accept: ClassVar[Acceptance]
    verify_mask: SlicedTreeMask | None = None
    #: a γ policy may end the round's chain inside the drafting (``stops_drafting``: SpecDec++)
    supports_draft_stop: ClassVar[bool] = False
    #: the rounds keep the target's hidden states at the committed positions they verified (``spec.hidden``)
    reads_target_hidden: ClassVar[bool] = False

    def __init__(self, pair: ModelPair, params: P | None = None, *,
                 gamma_policy: PolicyParams | GammaPolicy | None = None, sync_timing: bool = False):
        """``gamma_policy``: the policy's Params (default: ``fixed``, γ = ``params.gamma`` every round), or a
        runtime policy object (tests, studies)."""
        self.params = params if params is not None else self.Params()
        if isinstance(gamma_policy, GammaPolicy):
            self.policy_params, self.gamma_policy = None, gamma_policy
        else:
            self.policy_params = gamma_policy if gamma_policy is not None else FixedParams()
            self.gamma_policy = self.policy_params.build(int(self.params.gamma), self.max_depth())
        if getattr(self.gamma_policy, "draft_stop", None) is not None and not self.supports_draft_stop:
            raise ConfigError(f"gamma_policy={getattr(self.gamma_policy, 'name', '?')} ends rounds inside the drafting; "
                              f"method '{self.method}' does not draft a chain it could stop")
        super().__init__(pair, self.params, sync_timing=sync_timing)

    def needs_timing(self) -> bool:
        return bool(self.gamma_policy.needs_timing)

    def warmup_generations(self) -> int:
        return self.gamma_policy.warmup_generations()

    def max_depth(self) -> int | None:
        """The deepest round this decoder can draft (None: any); a γ policy's γ_max is lowered to it."""
        return None

    def request(self, ids: torch.Tensor, max_new_tokens: int, generator, stop: Sequence[str] | None) -> DecodeRequest:
        return replace(super().request(ids, max_new_tokens, generator, stop), gamma_policy=self.gamma_policy)

    @abstractmethod
    def propose(self, spec: Speculation, depth: int) -> DraftTree | Proposal:
        """The round's draft: ``depth`` levels (0: none, the round is one target step)."""

    def acceptance(self, spec: Speculation) -> Acceptance:
        """The sampling acceptance of this generation's rounds (default: the class's ``accept``)."""
        return self.accept

    def begin(self, spec: Speculation) -> None:
        """A generation starts (e.g. per-generation state in ``spec.state``, an extra target call)."""

    def extras(self, spec: Speculation) -> Any:
        """The generation's declared ``Extras`` (None: the defaults)."""
        return None

    def start(self, prompt_ids: torch.Tensor, generator) -> Speculation:
        """A generation's state, ready for :meth:`round`: caches with the prompt pending, the decoder's ``begin``
        done, and this generation's acceptance (``spec.accept``; greedy decoding accepts the target's argmax)."""
        spec = Speculation(self.target, self.draft, prompt_ids, self.params.warp, generator, self.sync_timing)
        spec.want_hidden = self.reads_target_hidden
        stop_hook = getattr(self.gamma_policy, "draft_stop", None)  # a policy deciding inside the round (SpecDec++)
        spec.draft_stop = stop_hook(spec.warp) if stop_hook is not None else None
        self.begin(spec)
        accept = self.acceptance(spec)
        spec.accept = accept.greedy() if spec.warp.is_greedy else accept
        return spec

    def round(self, spec: Speculation, depth: int) -> Round:
        """One round of ``depth`` levels: :func:`~harness.primitives.spec_loop.speculative_round` with this
        decoder's draft, acceptance and verification mask."""
        return speculative_round(spec, partial(self.propose, spec, depth), spec.accept, self.verify_mask)

    def _decode(self, request: DecodeRequest) -> Decoded:
        spec = self.start(request.prompt_ids, request.generator)
        tokens, rounds = speculative_loop(partial(self.round, spec), request.gamma_policy, request.prompt,
                                          request.max_new_tokens, request.stop)
        return Decoded(tokens, self.extras(spec), rounds=rounds)

    def params_dict(self) -> dict[str, Any]:
        """The method's parameters and its γ policy's, the policy's as the summary's flat columns
        (:func:`harness.adaptive.columns.policy_columns`), so summaries of every version share their columns."""
        policy = ({"name": self.policy_params.name, **self.policy_params.as_dict()} if self.policy_params is not None
                  else {"name": getattr(self.gamma_policy, "name", type(self.gamma_policy).__name__)})
        return {**self.params.as_dict(), **policy_columns(policy)}


class DraftFreeDecoder(SpeculativeDecoder[P]):
    """A speculative decoder without a draft model, whose candidates come from the text or the target itself
    (prompt lookup, lookahead): no draft loaded or cached, no draft selection, and no γ policy (a longer lookup
    costs no drafting to adapt; the round's depth is the method's cap, ``params.gamma``)."""

    uses_draft = False
    uses_gamma_policy = False
    supports_draft_selection = False

    def params_dict(self) -> dict[str, Any]:
        """The method's parameters only (no γ policy: as :meth:`harness.methods.MethodSpec.params_dict` reports it)."""
        return self.params.as_dict()
