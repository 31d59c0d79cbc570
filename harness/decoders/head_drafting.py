"""What the trained-head decoders (Medusa, EAGLE-2) share: a draft-free speculative decoder whose draft is a head.

A :class:`HeadDecoder` has no draft model and no draft cache (``uses_draft = False``); its head
(:mod:`harness.heads`) reads the target's last hidden states, which the template keeps from every
verification (``reads_target_hidden``: ``spec.hidden``, the committed positions the round fed). The head's
calls are the method's draft calls (:class:`~harness.primitives.forward.CountedHead`) and run inside the round's
drafting time, so tokens/s, the draft/verify split and energy attribution compare with SD's.

The first round of a generation has no hidden state yet: it is one plain target step over the prompt (γ = 0,
it commits the target's token; the reference's prefill). Every later round's candidates are a deterministic
function of the committed context, so the point-mass rule accepts them exactly
(:func:`~harness.primitives.acceptance.point_mass_select`; greedy: the target's argmax).
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch

from harness.decoders.speculative import P, SpeculativeDecoder
from harness.errors import ConfigError
from harness.primitives.acceptance import point_mass_select
from harness.primitives.forward import CountedHead
from harness.primitives.graphs import graph_runner, set_execution
from harness.primitives.spec_loop import TreeWalk
from harness.primitives.spec_state import DraftTree


class HeadDecoder(SpeculativeDecoder[P]):
    """Base of a draft-free decoder whose draft is a trained head on the target's hidden states (module doc)."""

    uses_draft = False
    supports_draft_selection = False
    reads_target_hidden = True
    in_default_sweep = False  # the trained-head methods run in their own experiments
    accept = TreeWalk(point_mass_select)
    head_key: ClassVar[str] = "head"  # the Params field naming the checkpoint (for messages)

    def __init__(self, pair, params=None, **kwargs):
        super().__init__(pair, params, **kwargs)
        ref = getattr(self.params, self.head_key)
        weight = next(pair.target.parameters())
        module = self.load_head(ref, weight.dtype, weight.device)
        self.head = CountedHead(module, sync=self.sync_timing)
        self.follow_execution()

    def follow_execution(self) -> None:
        """Run the head in the target's execution mode (``graphs``: its own runner, capturing iff the target's does,
        :mod:`harness.primitives.graphs`); called per generation, so the head follows a pair switched later."""
        target = graph_runner(self.pair.target)
        module = self.head.module
        if target is None:
            set_execution(module, "eager")
        else:
            set_execution(module, "graphs", capture=target.capture)
        self.head.runner = graph_runner(module)

    def execution_facts(self) -> dict[str, Any]:
        facts = super().execution_facts()
        if self.head.runner is not None:
            facts["head"] = {**self.head.runner.stats, "capture": self.head.runner.capture}
        return facts

    def start(self, prompt_ids, generator):
        self.follow_execution()
        return super().start(prompt_ids, generator)

    @abstractmethod
    def load_head(self, ref: str, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
        """The trained head named ``ref`` (``tiny/...``, a directory or a hub id), checked against the target."""

    def counted(self) -> dict[str, Any]:
        return {"target": self.target, "draft": self.head}

    def check_fits(self, ref: str, what: str, hidden_size: int, vocab_size: int | None = None) -> None:
        """ConfigError naming ``method.<head_key>`` unless the head reads this target's hidden states (and, with
        ``vocab_size``, predicts at least its vocabulary)."""
        config = self.pair.target.config
        target_hidden = int(config.hidden_size)
        if hidden_size != target_hidden:
            raise ConfigError(f"method.{self.head_key}={ref}: this {what} reads hidden states of size {hidden_size}, "
                              f"the target's ({self.pair.target_id or 'target'}) are {target_hidden}; "
                              f"a head must be trained on the target it drafts for")
        if vocab_size is not None and vocab_size < self.pair.vocab_size:
            raise ConfigError(f"method.{self.head_key}={ref}: this {what} predicts {vocab_size} tokens, the pair's "
                              f"vocabulary has {self.pair.vocab_size}")

    @staticmethod
    def no_draft(spec) -> DraftTree:
        """The round's draft before any hidden state (the prefill round) or at γ = 0: none."""
        return DraftTree.empty(spec.caches.target_pending.device)
