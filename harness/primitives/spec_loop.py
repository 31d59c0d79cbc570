"""The speculative round and the loop around it, written once for every draft-then-verify decoder.

* :class:`Speculation` — one generation's state: both models and their caches, the warp, the random
  stream, and the decoder's per-generation ``state``;
* :func:`speculative_round` — THE round: clock → draft (a :class:`~harness.primitives.spec_state.DraftTree`,
  or a :class:`~harness.primitives.drafting.Proposal` of merged duplicates) → ONE target forward over the
  committed-but-uncached tokens and the whole tree (tree attention; a chain is a tree of width 1; an
  optional sliced mask) → acceptance → commit both caches → one :class:`~harness.primitives.round.Round`;
* acceptances — how a verified tree is accepted: :class:`ChainAcceptance` (a chain rule of
  :mod:`~harness.primitives.acceptance`), :class:`TreeWalk` (a selection rule at every node, walked from
  the root; :func:`walk_tree`); target-rooted trees add theirs (:mod:`~harness.primitives.multi_candidate`).
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

from harness.primitives.acceptance import NO_CORRECTION, ROWS, ChainRule, SelectionRule, greedy_chain, greedy_select
from harness.primitives.device import host_constant
from harness.primitives.drafting import DraftStop, Proposal, draft_tree
from harness.primitives.gamma_policy import GammaPolicy
from harness.primitives.round import Round
from harness.primitives.sampling import sample
from harness.primitives.spec_state import DraftTree, SpeculativeCaches, commit_draft, commit_target
from harness.primitives.stopping import StopCondition
from harness.primitives.tree_attention import SlicedTreeMask, level_masks, tree_forward
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

    def draft_tree(self, widths: list[int], replacement: bool = True, **options) -> DraftTree:
        """The draft's tree for this round (:func:`~harness.primitives.drafting.draft_tree`)."""
        if self.draft_stop is not None:
            options.setdefault("stop", self.draft_stop)
        if options.get("roots") is None and "masks" not in options and max(widths, default=1) > 1:  # sliced masks
            options["masks"] = level_masks(widths, next(self.draft.model.parameters()).dtype, self.draft.device)
        return draft_tree(self.draft, self.caches, widths, self.warp, self.generator, replacement, **options)


@dataclass
class Verified:
    """A proposal after the target's forward: ``p(node)`` the warped target distribution after a node
    (−1: after the committed sequence), ``q(node)`` the draft's there (None when greedy)."""

    proposal: Proposal
    stem_logits: torch.Tensor  # (1, V): the target's logits at the committed sequence's end
    node_logits: torch.Tensor  # (N, V): after each node of ``proposal.tree``
    warp: Warp
    #: set by an acceptance that read the round's outcome in one transfer (:class:`ChainAcceptance`): the tree's
    #: tokens on the host, and the next token still on the device, (1, 1) — the round then reads nothing more
    tree_tokens: list[int] | None = None
    next_ids: torch.Tensor | None = None
    #: long values (1-D, on the device) a decoder needs on the host this round, read with the round's outcome by
    #: the tree walks (:func:`walk_tree`, :func:`greedy_walk`) into ``extra_host``: no read of their own
    extra: torch.Tensor | None = None
    extra_host: list[int] | None = None

    def p(self, node: int) -> torch.Tensor:
        return self.warp.probs(self.stem_logits[-1] if node < 0 else self.node_logits[node])

    def q(self, node: int) -> torch.Tensor | None:
        return None if self.warp.is_greedy else self.proposal.dtree.q_after(self.proposal.draft_of(node))

    def chain_logits(self) -> torch.Tensor:
        """(n + 1, V): the target's logits after 0..n tokens of a chain."""
        return torch.cat([self.stem_logits[-1:], self.node_logits])


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


def greedy_walk(v: Verified) -> tuple[list[int], int]:
    """:func:`walk_tree` with :func:`~harness.primitives.acceptance.greedy_select` from the committed sequence,
    with one read: the target's argmax after the sequence and after every node, and the tree's tokens, come to
    the host in one transfer and the walk runs there (the same path: at each node the first candidate, in draw
    order, that is the target's argmax). Sets ``v.tree_tokens`` and ``v.next_ids``."""
    tokens = v.proposal.tree.tokens.reshape(-1)
    best = torch.cat([v.stem_logits[-1:], v.node_logits]).argmax(-1)  # best[u + 1]: the argmax after node u
    values = torch.cat([best, tokens, *_extra(v)]).tolist()
    best_h, v.tree_tokens = values[:best.numel()], values[best.numel():best.numel() + tokens.numel()]
    _take_extra(v, values)
    children = v.proposal.candidates
    path: list[int] = []
    node = -1
    while True:
        hit = next((c for c in children.get(node, ()) if v.tree_tokens[c] == best_h[node + 1]), None)
        if hit is None:
            break
        path.append(hit)
        node = hit
    v.next_ids = best[node + 1:node + 2].reshape(1, 1)
    return path, best_h[node + 1]


def _split(values: list[int]) -> tuple[list[int], list[int]]:
    return values[:2], values[2:]


def _extra(v: Verified) -> list[torch.Tensor]:
    return [] if v.extra is None else [v.extra.reshape(-1).to(torch.long)]


def _take_extra(v: Verified, values: list[int]) -> None:
    """The round's read ends with ``v.extra``'s values: hand them over as ``v.extra_host``."""
    if v.extra is not None:
        n = v.extra.numel()
        v.extra_host = values[len(values) - n:] if n else []


@dataclass
class Walk:
    """The outcome of :func:`walk_tree`: per start, the accepted nodes below it (``paths``) and the node where its
    walk stopped (``ends``, the start itself when nothing was accepted); with ``draw_next`` (one start), the next
    token drawn where the walk stopped, on the device (``next_ids``, (1, 1)) and on the host (``next_token``)."""

    paths: list[list[int]]
    ends: list[int]
    logits: torch.Tensor  # (offset + N, V): the target's logits after the committed sequence (row 0) and each node
    offset: int
    rows: dict[int, int]  # node -> its row among the nodes with candidates
    corrections: torch.Tensor | None  # (M, V): each such node's correction distribution
    warp: Warp
    next_ids: torch.Tensor | None = None
    next_token: int | None = None

    def dist_at(self, node: int) -> torch.Tensor:
        """The distribution of the token after a walk stopped at ``node``: the rule's correction where the node has
        candidates (none accepted), p̃ after it at a leaf (the bonus distribution)."""
        if node in self.rows and self.corrections is not None:
            return self.corrections[self.rows[node]]
        return self.warp.probs(self.logits[node + self.offset])


def walk_tree(v: Verified, select: SelectionRule, generator, starts: list[int], draw_next: bool,
              keys: torch.Tensor | None = None) -> Walk:
    """THE tree walk: down a verified token tree from each of ``starts`` (−1: the committed sequence), accepting
    with ``select`` — with one host-to-device copy and ONE read (issue 28 item 2).

    At node u the candidates ``v.proposal.candidates[u]`` (children in draw order) go through the rule; the walk
    moves to the accepted child, or stops where none is accepted (the rule's correction distribution) or at a leaf
    (p̃ after it, the bonus distribution). The rule runs at every node with candidates at once
    (:data:`~harness.primitives.acceptance.ROWS`, each node with its own uniforms); with ``draw_next`` (one start)
    the walk is also followed on the device, level by level, and the next token drawn from where it stops. The
    outcome, the tree's tokens and that token come to the host in one transfer, where the walk follows the outcome:
    the nodes it does not visit are never looked at, so every visited node's decision and the drawn token are as
    the sequential walk's (the same law). ``keys`` (N,): a value per node the rule reads at each candidate (a rule
    that looks below the node: :func:`~harness.primitives.acceptance.typical_select`). Sets ``v.tree_tokens``."""
    cands, tokens = v.proposal.candidates, v.proposal.tree.tokens.reshape(-1)
    off = min(v.stem_logits.size(0), 1)
    logits = torch.cat([v.stem_logits[-1:], v.node_logits])  # row u + off: after node u
    rows = sorted((u for u in cands if u >= 0 or -1 in starts), key=lambda u: -len(cands[u]))  # widest first
    row_of = {u: r for r, u in enumerate(rows)}
    width = max((len(cands[u]) for u in rows), default=0)
    q_all, q_row = _q_rows(v)
    packed = [x for u in rows for x in (u + off, q_row(u), *cands[u], *[0] * (width - len(cands[u])),
                                        *[1] * len(cands[u]), *[0] * (width - len(cands[u])))]
    packed += [row_of.get(u, -1) for u in range(-off, tokens.numel())]  # each node's row (−1: none)
    acc, corr, table = torch.empty(0, dtype=torch.long, device=logits.device), None, None
    if rows:  # the walk's one upload: which rows, their q̃, their candidates, and each node's row
        idx = host_constant(tuple(packed), logits.device)
        table = idx[:len(rows) * (2 + 2 * width)].reshape(len(rows), 2 + 2 * width)
        q = None if q_all is None else q_all.index_select(0, table[:, 1])
        p = None if select in NO_CORRECTION else v.warp.probs(logits.index_select(0, table[:, 0]))
        acc, corr = ROWS[select](p, q,
                                 tokens.to(logits.device)[table[:, 2:2 + width]], table[:, 2 + width:].bool(),
                                 generator, counts=[len(cands[u]) for u in rows],
                                 **({} if keys is None else {"keys": keys[table[:, 2:2 + width]]}))
    walk = Walk([], [], logits, off, row_of, corr, v.warp)
    if draw_next:
        if len(starts) != 1:
            raise ValueError("a walk draws its next token from one start")
        walk.next_ids = _draw_at_end(walk, starts[0], acc, table, idx[len(table) * table.size(1):] if rows else None,
                                     _depth(v.proposal.tree.parents), generator)
    out = torch.cat([acc, tokens, *([] if walk.next_ids is None else [walk.next_ids.reshape(-1)]),
                     *_extra(v)]).tolist()  # THE read
    _take_extra(v, out)
    v.tree_tokens = out[len(rows):len(rows) + tokens.numel()]
    for start in starts:
        node, path = start, []
        while node in row_of and out[row_of[node]] >= 0:
            node = cands[node][out[row_of[node]]]
            path.append(node)
        walk.paths.append(path)
        walk.ends.append(node)
    if draw_next:
        walk.next_token = out[len(rows) + tokens.numel()]
    return walk


def _depth(parents: list[int]) -> int:
    depth = [0] * len(parents)
    for i, p in enumerate(parents):
        depth[i] = 1 if p < 0 else depth[p] + 1
    return max(depth, default=0)


def _draw_at_end(walk: Walk, start: int, acc: torch.Tensor, table: torch.Tensor | None, row_of: torch.Tensor | None,
                 depth: int, generator) -> torch.Tensor:
    """The next token, (1, 1) on the device: the walk followed on the device (one gather per level, no read) to the
    node where it stops, and a token drawn from :meth:`Walk.dist_at` there (its argmax when greedy)."""
    device = walk.logits.device
    node = torch.zeros((), dtype=torch.long, device=device) + (start + walk.offset)  # a row of ``walk.logits``
    if table is not None and row_of is not None:
        width = (table.size(1) - 2) // 2
        for _ in range(depth):
            r = row_of[node]
            a = acc[r.clamp_min(0)]
            go = (r >= 0) & (a >= 0)
            node = torch.where(go, table[r.clamp_min(0), 2 + a.clamp(0, max(width - 1, 0))] + walk.offset, node)
    p_end = walk.warp.probs(walk.logits.index_select(0, node.reshape(1)))[0]
    if walk.corrections is not None and row_of is not None:
        r = row_of[node]
        p_end = torch.where(r >= 0, walk.corrections.index_select(0, r.clamp_min(0).reshape(1))[0], p_end)
    return (p_end.argmax(-1) if walk.warp.is_greedy else sample(p_end, generator)[0]).reshape(1, 1)


def _q_rows(v: Verified):
    """(the draft's q̃ rows on the device or None, row of q̃ after target node u): None when greedy or when the
    drafts are deterministic (a point mass each); row 0 is q̃ at the committed sequence where there is one."""
    dtree = v.proposal.dtree
    if v.warp.is_greedy or (dtree.root_q is None and dtree.node_q is None):
        return None, lambda u: 0
    if dtree.node_q is None:
        assert dtree.root_q is not None
        return dtree.root_q[None], lambda u: 0
    head = 0 if dtree.root_q is None else 1
    q_all = dtree.node_q if dtree.root_q is None else torch.cat([dtree.root_q[None], dtree.node_q])

    def row(u: int) -> int:
        d = v.proposal.draft_of(u)
        if d < 0 and not head:
            raise ValueError("the walk needs q̃ at the committed sequence, which this draft did not keep")
        return d + head

    return q_all, row


def speculative_round(spec: Speculation, propose: Callable[[], DraftTree | Proposal], accept: Acceptance,
                      sliced: SlicedTreeMask | None = None) -> Round:
    """One round: ``propose()`` drafts (timed as drafting), ONE target forward scores the pending tokens and the
    proposal's tree (``sliced``: the mask it is sliced from, mcsd §3.2), ``accept`` picks the accepted path
    and the next token (None: the path ends the committed sequence, mcsd §3.1), both caches keep the path,
    and the round is returned (γ_r = the draft's levels, target-sampled roots excluded)."""
    caches = spec.caches
    with caches.clock.drafting():
        draft_prefix = caches.draft_prefix()
        proposal = propose()
        if isinstance(proposal, DraftTree):
            proposal = Proposal.of(proposal)
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
        commit_target(caches, target_prefix, path, token, verified.next_ids)
        commit_draft(caches, draft_prefix, proposal.dtree, proposal.draft_path(path), token, path_tokens,
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
