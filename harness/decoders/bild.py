"""BiLD: big little decoder (Kim et al. 2023), the lossy baseline of the mtad paper (§5, §6, Table 15).

Fallback policy: the draft model generates tokens one at a time (sampled from T∘q) while its
confidence max T∘q(· | x_{<t}) ≥ τ1, at most γ tokens; a token drafted with confidence < τ1 is
dropped and control falls back to the target. Rollback policy: ONE target call scores the drafted
tokens; the first one whose negative log-likelihood −log T∘p(x_t | x_{<t}) exceeds τ2 is replaced,
with everything after it, by a token sampled from T∘p there; if none exceeds τ2 the target adds
the next token after the last draft. Lossy: the output does not follow T∘p exactly.

As in the mtad paper's code base (App. F), both models' distributions are warped by T before use, so
confidence and NLL are taken on T∘q and T∘p. With temperature 0 (one-hot T) no token ever falls
back and a draft survives iff it is the target's argmax: the output is the target's greedy output.
Table 15 defaults: γ = 10, τ1 = 0.9, τ2 ∈ {1, 2, 3} (2 here).

Host reads (issue 28 item 2), the same law: the draft drafts in chunks and one read per chunk says where its
confidence fell, except for the chunk that reaches γ: the target scores all of it and the fallback point is found on
the device (a draft at or after it counts as rolled back, the token drawn from T∘p there as BiLD's target does),
read with the round's outcome. The first chunk is the shortest of the last rounds' runs + 1; after a chunk
that did not fall, the rest up to γ at once where the last runs were long (then at most 2 reads per round, 1 when the
first chunk is γ), else one draft at a time (a read per draft, as the token-by-token policy: a short-run draft would
pay for fewer reads with drafts drawn past the fallback, +14 % CPU time on the tiny pair at τ1 = 0.9). A draft after
the fallback point is drawn but never used: BiLD's tokens and decisions are the same functions of the same draws.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import torch

from harness.decoders.base import register
from harness.decoders.params.bild import BiLDParams
from harness.decoders.speculative import SpeculativeDecoder
from harness.primitives.acceptance import bild_rule, parameterised
from harness.primitives.drafting import draft_tree
from harness.primitives.sampling import sample
from harness.primitives.spec_loop import ChainAcceptance
from harness.primitives.spec_state import DraftTree, SpeculativeCaches
from harness.primitives.tree_walk import Verified

RUNS_KEPT = 4  # the last rounds' confident runs the first chunk is sized from


@dataclass
class BiLDExtras:
    fallbacks: int = 0  # rounds whose drafting stopped on a draft confidence < τ1 (rollbacks: rejected_rounds)


@dataclass
class _Drafting:
    """One sampling generation's drafting state: the extras, the last rounds' confident runs, and the round's
    confidence mask when its fallback point is left to the device (None: the drafts sent are all confident)."""

    extras: BiLDExtras = field(default_factory=BiLDExtras)
    runs: deque[int] = field(default_factory=lambda: deque([0], maxlen=RUNS_KEPT))
    confident: torch.Tensor | None = None

    def chunk(self, depth: int) -> int:
        """The first chunk: one more than the shortest of the last runs (a run and its end; a longer guess draws
        drafts past the fallback whenever the run is shorter: the median cost 1.11x [1.00, 1.23] on the tiny pair
        at τ1 = 0.5)."""
        return max(1, min(depth, min(self.runs) + 1))

    def long_runs(self, depth: int) -> bool:
        """Whether the last runs reached half the budget on average: then a chunk that did not fall is drafted
        on to the budget unread (one read fewer per round for a few drafts drawn past a fallback)."""
        return 2 * sum(self.runs) >= depth * len(self.runs)


@dataclass(frozen=True)
class BiLDAcceptance:
    """BiLD's rollback policy where the fallback point may lie inside the scored drafts (``state.confident``): the
    first draft that fails τ2 or was drafted unsure ends the accepted prefix, the next token comes from T∘p there,
    and the round's ONE read brings the count, the next token, the fallback point and the drafts."""

    state: _Drafting
    threshold: float

    def __call__(self, v: Verified, generator) -> tuple[list[int], int]:
        tokens, st = v.proposal.tree.tokens.reshape(-1), self.state
        if st.confident is None:
            return ChainAcceptance(parameterised(bild_rule, threshold=self.threshold))(v, generator)
        p = v.warp.probs(v.chain_logits())
        nll = -torch.log(p[:-1].gather(1, tokens[:, None]).squeeze(1))
        sure = st.confident.long().cumprod(0)  # the drafts before the fallback point
        kept = ((nll <= self.threshold).long() * sure).cumprod(0).sum()  # first_rollback, the unsure ones failing
        next_ids = sample(p.index_select(0, kept.reshape(1))[0], generator).reshape(1, 1)
        values = torch.cat([kept.reshape(1), next_ids.reshape(1), sure.sum().reshape(1), tokens]).tolist()
        kept_h, token, n_sure = values[:3]
        v.tree_tokens, v.next_ids = values[3:], next_ids
        _observe(st, n_sure, tokens.numel(), v.proposal.dtree)
        return list(range(kept_h)), token

    def greedy(self) -> ChainAcceptance:
        return ChainAcceptance(parameterised(bild_rule, threshold=self.threshold)).greedy()


def _observe(st: _Drafting, n_sure: int, sent: int, dtree: DraftTree) -> None:
    """The round's fallback point, read: its run, a fallback, and γ_r = the confident drafts (the rest are not
    BiLD's drafts: its draft never sends them)."""
    st.runs.append(n_sure)
    st.extras.fallbacks += n_sure < sent
    dtree.depth, dtree.n_dead = n_sure, sent - n_sure


@register
class BiLD(SpeculativeDecoder[BiLDParams]):
    """Rounds: γ_r is the number of drafts sent to the target (the fallback token is not one), so a
    round is rejected (``rejected_rounds``) exactly when it rolls back."""

    method = "bild"
    lossless_when_greedy = True  # the target's argmax decides every token
    Extras = BiLDExtras

    def acceptance(self, spec):
        return BiLDAcceptance(spec.state, self.params.rollback_threshold)

    def begin(self, spec):
        spec.state = _Drafting()

    def extras(self, spec):
        return spec.state.extras

    def propose(self, spec, depth):
        spec.state.confident = None
        if spec.warp.is_greedy or depth == 0:  # greedy: every draft is sure (max of a one-hot)
            tokens, num_fed = self._draft_greedy(spec.caches, depth, spec.generator)
            return DraftTree.chain(tokens, num_fed)
        return self._draft_sampled(spec, depth)

    def _draft_sampled(self, spec, depth: int) -> DraftTree:
        """The fallback policy in chunks: where each chunk's confidence fell is read once, except the chunk that
        reaches ``depth``, whose fallback point the device finds (read with the outcome). The first chunk is the
        run the last rounds suggest; after it, the rest at once where the runs are long, else one draft at a time
        (no draft drawn past a fallback: a short-run draft does not pay for fewer reads with wasted drafts)."""
        caches, st, tau = spec.caches, spec.state, self.params.fallback_threshold
        chunk, drafted = st.chunk(depth), 0
        tokens: list[torch.Tensor] = []
        sure_before: list[torch.Tensor] = []
        while True:
            part = draft_tree(self.draft, caches, [1] * chunk, self.params.warp, spec.generator)
            sure = _sure(part, tau)
            tokens.append(part.tokens)
            drafted += chunk
            if drafted == depth:  # the budget reached: the device finds the fallback point
                st.confident = torch.cat([*sure_before, sure])
                return DraftTree.chain(torch.cat(tokens), drafted - 1)
            n_sure = int(sure.long().cumprod(0).sum())  # a fallback read
            if n_sure < chunk:  # fell inside the chunk: send the sure drafts, as BiLD's draft does
                n = drafted - chunk + n_sure
                st.runs.append(n)
                st.extras.fallbacks += 1
                return DraftTree.chain(torch.cat(tokens)[:n], n)
            sure_before.append(sure)
            caches.draft_pending = part.tokens[-1:][None]
            chunk = depth - drafted if st.long_runs(depth) else 1

    def _draft_greedy(self, caches: SpeculativeCaches, depth: int, generator) -> tuple[torch.Tensor, int]:
        """Greedy drafting: ``depth`` drafts one at a time (the argmax is always sure); how many were fed."""
        drafted: list[torch.Tensor] = []
        for _ in range(depth):
            one = draft_tree(self.draft, caches, [1], self.params.warp, generator)
            drafted.append(one.tokens)
            caches.draft_pending = one.tokens[None]
        tokens = torch.cat(drafted) if drafted else torch.empty(0, dtype=torch.long, device=self.device)
        return tokens, max(len(drafted) - 1, 0)


def _sure(dtree: DraftTree, tau: float) -> torch.Tensor:
    """(n,) bool on the device: which of a sampled chain's drafts were drawn with confidence max T∘q ≥ τ1."""
    assert dtree.root_q is not None
    q = dtree.root_q[None] if dtree.node_q is None else torch.cat([dtree.root_q[None], dtree.node_q])
    return q.max(-1).values >= tau
