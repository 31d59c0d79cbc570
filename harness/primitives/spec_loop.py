"""The speculative round and the loop around it, written once for every draft-then-verify decoder.

* :class:`Speculation` — one generation's state: both models and their caches, the warp, the random
  stream, and the decoder's per-generation ``state``;
* :func:`speculative_round` — THE round: clock → draft (a :class:`~harness.primitives.spec_state.DraftTree`,
  or a :class:`~harness.primitives.drafting.Proposal` of merged duplicates) → ONE target forward over the
  committed-but-uncached tokens and the whole tree (tree attention; a chain is a tree of width 1; an
  optional sliced mask) → acceptance → commit both caches → one :class:`~harness.primitives.round.Round`;
* acceptances — how a verified tree is accepted: :class:`ChainAcceptance` (a chain rule of
  :mod:`~harness.primitives.acceptance`), :class:`TreeWalk` (a selection rule at every node, walked from
  the root; :func:`~harness.primitives.tree_walk.walk_tree`); target-rooted trees add theirs
  (:mod:`~harness.primitives.multi_candidate`).
  Each has a :meth:`greedy` form (the target's argmax), which every decoder uses under greedy decoding;
* :func:`speculative_loop` — rounds until ``max_new_tokens``, EOS or a stop string, γ from a
  :class:`~harness.primitives.gamma_policy.GammaPolicy`; it returns the rounds (the decoder's base records them).

Each round's drafting and verification are timed by the caches' :class:`~harness.primitives.spec_state.StepClock`.
``temperature == 0`` is greedy: drafts are the draft's argmax (top-k for several children), a draft
token is accepted iff it is the target's argmax, so the output is the target's greedy output.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import torch

from harness.primitives.acceptance import ChainRule, SelectionRule, greedy_chain, greedy_select
from harness.primitives.device import host_constant
from harness.primitives.drafting import DraftStop, Proposal, draft_tree
from harness.primitives.gamma_policy import GammaPolicy
from harness.primitives.round import Round
from harness.primitives.sampling import sample
from harness.primitives.spec_state import DraftTree, SpeculativeCaches, commit_draft, commit_target
from harness.primitives.stopping import StopCondition
from harness.primitives.tree_attention import SlicedTreeMask, level_masks, tree_forward
from harness.primitives.tree_walk import Verified, greedy_walk, walk_tree
from harness.primitives.warping import Warp


def draw(dist: torch.Tensor, warp: Warp, generator) -> int:
    """The next token from a (warped, or correction) distribution: its argmax when greedy."""
    return int(dist.argmax()) if warp.is_greedy else int(sample(dist, generator)[0])


class Speculation:
    """One speculative generation: target and draft (:class:`~harness.primitives.forward.CountedModel`; no
    draft for a draft-free method), their caches with the prompt pending, the warp, the random stream,
    ``tokens`` (the prompt and every token committed so far), and ``state``, whatever per-generation state the
    decoder keeps (e.g. a target-initialised tree's next-token distribution).

    Optional, off by default: with ``want_hidden`` each round keeps the target's last hidden states (after the
    final norm) at the committed positions its verification fed — the tokens pending before it, then the
    accepted path — as ``hidden`` (k, H): ``hidden[i]`` is at ``tokens[-k - 1 + i]``, the token after it
    ``tokens[-k + i]`` (the trained heads read them: Medusa, EAGLE; None before the first round), and those k
    tokens after them still on the device as ``hidden_tokens`` (1, k) (None where the round's token was not
    drawn there: then read them from ``tokens``). ``draft_stop``:
    a :class:`~harness.primitives.drafting.DraftStop` every :meth:`draft_tree` uses unless given one (a γ policy
    that decides inside the round, SpecDec++)."""

    def __init__(self, target, draft, prompt_ids: torch.Tensor, warp: Warp, generator, sync_timing: bool = False):
        self.target, self.draft, self.warp, self.generator = target, draft, warp, generator
        self.caches = SpeculativeCaches(target, draft, prompt_ids, sync_timing)
        self.tokens: list[int] = prompt_ids[0].tolist()
        self.state = None
        self.accept: Acceptance | None = None  # the rounds' acceptance, set by the decoder
        self.want_hidden = False
        self.hidden: torch.Tensor | None = None
        self.hidden_tokens: torch.Tensor | None = None
        self.draft_stop: DraftStop | None = None
        self.round_masks: SlicedTreeMask | None = None  # the sliced masks this round's drafting used

    def draft_tree(self, widths: list[int], replacement: bool = True, **options) -> DraftTree:
        """The draft's tree for this round (:func:`~harness.primitives.drafting.draft_tree`)."""
        if self.draft_stop is not None:
            options.setdefault("stop", self.draft_stop)
        if options.get("roots") is None and "masks" not in options and max(widths, default=1) > 1:  # sliced masks
            options["masks"] = level_masks(widths, next(self.draft.model.parameters()).dtype, self.draft.device)
        self.round_masks = options.get("masks")
        return draft_tree(self.draft, self.caches, widths, self.warp, self.generator, replacement, **options)

    def target_masks(self) -> SlicedTreeMask | None:
        """The round's drafting masks where the target can slice its verification mask from them too (its device:
        the tree it scores is the drafted one, so no mask is built or copied; a tree that is not their truncation,
        or another dtype, is built as before, :func:`~harness.primitives.tree_attention.attention_inputs`)."""
        masks = self.round_masks
        if masks is None or torch.device(masks.device) != torch.device(self.target.device):
            return None
        return masks


class Acceptance(Protocol):
    """``(verified, generator) -> (accepted target-tree nodes, the next token or None)``."""

    def __call__(self, v: Verified, generator) -> tuple[list[int], int | None]: ...

    def greedy(self) -> Acceptance: ...


@dataclass(frozen=True)
class ChainAcceptance:
    """A chain accepted by a :data:`~harness.primitives.acceptance.ChainRule`; the next token is drawn from
    the rule's distribution."""

    rule: ChainRule

    def __call__(self, v: Verified, generator) -> tuple[list[int], int]:
        tokens = v.proposal.tree.tokens
        kept, dist = self.rule(v.chain_logits(), tokens, v.proposal.dtree, v.warp, generator)
        if not isinstance(kept, torch.Tensor):  # a rule that read its count on the host
            return list(range(kept)), draw(dist, v.warp, generator)
        next_ids = (dist.argmax(-1, keepdim=True) if v.warp.is_greedy else sample(dist, generator)).reshape(1, 1)
        # the round's one read: the count, the next token and the drafts, in one transfer
        head, v.tree_tokens = _split(torch.cat([kept.reshape(1), next_ids.reshape(1), tokens.reshape(-1)]).tolist())
        v.next_ids = next_ids
        return list(range(head[0])), head[1]

    def greedy(self) -> ChainAcceptance:
        return ChainAcceptance(greedy_chain)


@dataclass(frozen=True)
class TreeWalk:
    """A tree walked from the root with a :data:`~harness.primitives.acceptance.SelectionRule` (:func:`walk_tree`);
    the correction or bonus token is drawn where the walk stops."""

    select: SelectionRule

    def __call__(self, v: Verified, generator) -> tuple[list[int], int]:
        if self.select is greedy_select and v.stem_logits.size(0):
            return greedy_walk(v)
        walk = walk_tree(v, self.select, generator, [-1], draw_next=True)
        assert walk.next_token is not None  # drawn (draw_next)
        v.next_ids = walk.next_ids
        return walk.paths[0], walk.next_token

    def greedy(self) -> TreeWalk:
        return TreeWalk(greedy_select)


def _split(values: list[int]) -> tuple[list[int], list[int]]:
    return values[:2], values[2:]


def speculative_round(spec: Speculation, propose: Callable[[], DraftTree | Proposal], accept: Acceptance,
                      sliced: SlicedTreeMask | None = None) -> Round:
    """One round: ``propose()`` drafts (timed as drafting), ONE target forward scores the pending tokens and the
    proposal's tree (``sliced``: the mask it is sliced from, mcsd §3.2), ``accept`` picks the accepted path
    and the next token (None: the path ends the committed sequence, mcsd §3.1), both caches keep the path,
    and the round is returned (γ_r = the draft's levels, target-sampled roots excluded)."""
    caches = spec.caches
    spec.round_masks = None
    with caches.clock.drafting():
        draft_prefix = caches.draft_prefix()
        proposal = propose()
        if isinstance(proposal, DraftTree):
            proposal = Proposal.of(proposal)
    sliced = sliced if sliced is not None else spec.target_masks()
    with caches.clock.verifying():
        target_prefix = caches.target_prefix()
        stem_logits, node_logits, *hidden = tree_forward(spec.target, caches.target_cache, caches.target_pending,
                                                         proposal.tree, sliced=sliced, all_stem=False,
                                                         return_hidden=spec.want_hidden)
        verified = Verified(proposal, stem_logits, node_logits, spec.warp)
        path, token = accept(verified, spec.generator)
        if hidden:
            _keep_hidden(spec, hidden, caches.target_pending, proposal.tree.tokens, path, verified.next_ids)
        if verified.tree_tokens is not None:
            path_tokens = [verified.tree_tokens[n] for n in path]
        else:
            path_tokens = proposal.tree.tokens[path].tolist()
        commit_target(caches, target_prefix, path, token, verified.next_ids, proposal.tree.parents)
        commit_draft(caches, draft_prefix, proposal.dtree, path, token, path_tokens,
                     verified.next_ids)
    draft_s, verify_s = caches.clock.take()
    dtree = proposal.dtree
    committed = path_tokens + ([] if token is None else [token])
    spec.tokens += committed
    return Round(tuple(committed), gamma=dtree.gamma, accepted=len(path) - (1 if dtree.n_roots else 0),
                 draft_nodes=dtree.draft_nodes, draft_time_s=draft_s, verify_time_s=verify_s)


def _keep_hidden(spec: Speculation, hidden: list[torch.Tensor], pending: torch.Tensor, tree_tokens: torch.Tensor,
                 path: list[int], next_ids: torch.Tensor | None) -> None:
    """``spec.hidden`` at the pending tokens and the path, and ``spec.hidden_tokens``, the tokens after them (the
    pending ones but the first, the path's, the next token), gathered on the device (no host-to-device copy)."""
    rows = host_constant(tuple(path), hidden[1].device)
    spec.hidden = torch.cat([hidden[0], hidden[1].index_select(0, rows)])
    if next_ids is None:
        spec.hidden_tokens = None
        return
    path_tokens = tree_tokens.reshape(1, -1).index_select(1, rows.to(tree_tokens.device))
    spec.hidden_tokens = torch.cat([pending[:, 1:], path_tokens, next_ids.reshape(1, 1)], dim=1)


def speculative_loop(step: Callable[[int], Round], policy: GammaPolicy, prompt_ids: list[int], max_new_tokens: int,
                     stop: StopCondition | int | None) -> tuple[list[int], list[Round]]:
    """Run ``step(depth) -> Round`` until ``max_new_tokens``, EOS or a stop string; return the tokens and rounds.

    The depth of a round is the policy's γ, clipped to the tokens still needed − 1 but at least 1
    (a shorter draft is as exact as a full one and saves work at the end); a policy's γ = 0 is one
    plain target step. ``stop`` is a :class:`~harness.primitives.stopping.StopCondition` (or just the
    EOS id): after each round it may cut the round's tokens, and the round is then recorded as cut
    (:meth:`~harness.primitives.round.Round.cut`), so the statistics describe the output. The policy
    observes every round once, as it finishes.
    """
    stop = StopCondition.of(stop)
    policy.reset(prompt_ids)
    out: list[int] = []
    rounds: list[Round] = []
    while len(out) < max_new_tokens:
        depth = max(0, min(policy.next_gamma(), max(1, max_new_tokens - len(out) - 1)))
        rnd = step(depth)
        end = stop.cut(out, rnd.committed)
        if end is not None:
            rnd = rnd.cut(end)
        rounds.append(rnd)
        policy.observe(rnd)
        out.extend(rnd.committed)
        if end is not None:
            break
    return out[:max_new_tokens], rounds
