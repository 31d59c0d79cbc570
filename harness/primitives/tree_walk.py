"""The tree walk: a verified token tree accepted from the root with a selection rule, on the device, read once.

* :class:`Verified` — a proposal after the target's forward (the target's and the draft's distributions at each
  node);
* :func:`walk_tree` — THE walk: the rule at every node with candidates at once (the rules' row forms,
  :data:`~harness.primitives.acceptance.ROWS`), the walk followed on the device to draw the next token, and ONE
  read of the outcome (issue 28 item 2); a proposal whose duplicates are merged on the device
  (:mod:`~harness.primitives.tree_merge`) is walked by class, at the drafted tree's fixed shape;
* :func:`greedy_walk` — the greedy walk (the target's argmax at each node), one read.

:mod:`~harness.primitives.spec_loop`'s acceptances (``TreeWalk``) and the target-rooted trees'
(:mod:`~harness.primitives.multi_candidate`) call these.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.primitives.acceptance import NO_CORRECTION, ROWS, TAKES_MAX_MULTI, SelectionRule
from harness.primitives.device import host_constant
from harness.primitives.drafting import Proposal
from harness.primitives.sampling import sample
from harness.primitives.tree import path_to
from harness.primitives.tree_attention import fork_width
from harness.primitives.warping import Warp


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
        return None if self.warp.is_greedy else self.proposal.dtree.q_after(node)

    def chain_logits(self) -> torch.Tensor:
        """(n + 1, V): the target's logits after 0..n tokens of a chain."""
        return torch.cat([self.stem_logits[-1:], self.node_logits])


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
    classes: list[int] | None = None  # merged on the device: each node's class (−2: dead), read with the outcome

    def dist_at(self, node: int) -> torch.Tensor:
        """The distribution of the token after a walk stopped at ``node``: the rule's correction where the node has
        candidates (none accepted), p̃ after it at a leaf (the bonus distribution)."""
        if node in self.rows and self.corrections is not None:
            return self.corrections[self.rows[node]]
        return self.warp.probs(self.logits[node + self.offset])


def walk_tree(v: Verified, select: SelectionRule, generator, starts: list[int], draw_next: bool,
              keys: torch.Tensor | None = None) -> Walk:
    """THE tree walk: down a verified token tree from each of ``starts`` (−1: the committed sequence), accepting
    with ``select`` — with one host-to-device copy (none for a shape seen before) and ONE read (issue 28 item 2).

    At node u the candidates ``v.proposal.candidates[u]`` (children in draw order) go through the rule; the walk
    moves to the accepted child, or stops where none is accepted (the rule's correction distribution) or at a leaf
    (p̃ after it, the bonus distribution). The rule runs at every node with candidates at once
    (:data:`~harness.primitives.acceptance.ROWS`, each node with its own uniforms); with ``draw_next`` (one start)
    the walk is also followed on the device, level by level, and the next token drawn from where it stops. The
    outcome, the tree's tokens and that token come to the host in one transfer, where the walk follows the outcome:
    the nodes it does not visit are never looked at, so every visited node's decision and the drawn token are as
    the sequential walk's (the same law). ``keys`` (N,): a value per node the rule reads at each candidate (a rule
    that looks below the node: :func:`~harness.primitives.acceptance.typical_select`). Sets ``v.tree_tokens``.

    Duplicates merged on the device (``v.proposal.merge``, :mod:`~harness.primitives.tree_merge`): a row per node
    with the next level's nodes as columns, masked to the children of its class (the union of the merged draft
    nodes' children, in draw order); the walk goes from class to class, and its path is the drafted chain to the
    last accepted node (the same tokens; the caches keep a chain the target scored as one)."""
    merge, tokens = v.proposal.merge, v.proposal.tree.tokens.reshape(-1)
    cands = v.proposal.candidates if merge is None else merge.columns
    off = min(v.stem_logits.size(0), 1)
    logits = torch.cat([v.stem_logits[-1:], v.node_logits])  # row u + off: after node u
    rows = sorted((u for u in cands if u >= 0 or -1 in starts), key=lambda u: -len(cands[u]))  # widest first
    row_of = {u: r for r, u in enumerate(rows)}
    width = max((len(cands[u]) for u in rows), default=0)
    q_all, q_row = _q_rows(v)
    acc, corr, table, node_rows = torch.empty(0, dtype=torch.long, device=logits.device), None, None, None
    if rows:  # which rows, their q̃, their candidates, and each node's row: one upload, none for a seen shape or fork
        table, node_rows = _walk_index(v, rows, row_of, cands, width, off, (q_all, q_row), starts, logits.device)
        cols, valid = table[:, 2:2 + width], table[:, 2 + width:].bool()
        if merge is not None:  # the rows of the classes' first nodes, their members' children as candidates
            valid = valid & merge.valid(table[:, 0] - off, cols)
            node_rows = merge.class_rows(node_rows, off)
        q = None if q_all is None else q_all.index_select(0, table[:, 1])
        p = None if select in NO_CORRECTION else v.warp.probs(logits.index_select(0, table[:, 0]))
        more = {} if keys is None else {"keys": keys[cols]}
        if merge is not None and select in TAKES_MAX_MULTI:  # each node is a candidate of one class: a bound
            more["max_multi"] = len({c for u in rows for c in cands[u]}) // 2
        acc, corr = ROWS[select](p, q, tokens.to(logits.device)[cols], valid, generator,
                                 counts=[len(cands[u]) for u in rows], **more)
    walk = Walk([], [], logits, off, row_of, corr, v.warp)
    if draw_next:
        if len(starts) != 1:
            raise ValueError("a walk draws its next token from one start")
        walk.next_ids = _draw_at_end(walk, starts[0], acc, table, node_rows, _depth(v.proposal.tree.parents),
                                     generator)
    out = torch.cat([acc, tokens, *([] if walk.next_ids is None else [walk.next_ids.reshape(-1)]),
                     *([] if merge is None else [merge.classes[1:]]), *_extra(v)]).tolist()  # THE read
    _take_extra(v, out)
    n, head = tokens.numel(), len(rows) + tokens.numel() + (1 if draw_next else 0)
    v.tree_tokens = out[len(rows):len(rows) + n]
    walk.next_token = out[len(rows) + n] if draw_next else None
    _follow(walk, v, starts, out, rows, cands, None if merge is None else out[head:head + n])
    return walk


def _walk_index(v: Verified, rows: list[int], row_of: dict[int, int], cands: dict[int, list[int]], width: int,
                off: int, q, starts: list[int], device) -> tuple[torch.Tensor, torch.Tensor]:
    """The walk's index on the device: ``table`` (R, 2 + 2·width), per row its node's logits row, its q̃ row, its
    candidates (padded) and their validity; ``node_rows`` (off + N,), each node's row (−1: none). Copied once per
    shape (:func:`~harness.primitives.device.host_constant`); a fork walked from the committed sequence
    (:func:`~harness.primitives.tree_attention.fork_width`: mcsd_dynamic's compact forks, whose width varies with
    its short first level) is computed on the device instead, with no copy."""
    parents, (q_all, q_row) = v.proposal.tree.parents, q
    n = fork_width(parents) if off and starts == [-1] and v.proposal.merge is None else None
    if n is not None:
        return _fork_index(n, len(parents) // n, None if q_all is None or v.proposal.dtree.node_q is None
                           else q_row(0), device)
    packed = [x for u in rows for x in (u + off, q_row(u), *cands[u], *[0] * (width - len(cands[u])),
                                        *[1] * len(cands[u]), *[0] * (width - len(cands[u])))]
    packed += [row_of.get(u, -1) for u in range(-off, len(parents))]  # each node's row (−1: none)
    idx = host_constant(tuple(packed), device)
    table = idx[:len(rows) * (2 + 2 * width)].reshape(len(rows), 2 + 2 * width)
    return table, idx[table.numel():]


def _fork_index(n: int, depth: int, q_head: int | None, device) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_walk_index` of the fork of ``n`` sequences and ``depth`` levels (level order) walked from the
    committed sequence (logits row 0): row 0 the committed sequence's (the n heads its candidates), row u + 1 node
    u's (its one child u + n), for the nodes above the last level; ``q_head``: q̃ after node u is row u + q_head
    (None: every row 0). Made by arithmetic on the device (no host-to-device copy)."""
    m = n * (depth - 1)
    u = torch.arange(-1, m, device=device)
    table = torch.zeros((m + 1, 2 + 2 * n), dtype=torch.long, device=device)
    table[:, 0] = u + 1
    if q_head is not None:
        table[:, 1] = u + q_head
    table[0, 2:2 + n] = torch.arange(n, device=device)
    table[0, 2 + n:] = 1
    table[1:, 2] = u[1:] + n
    table[1:, 2 + n] = 1
    j = torch.arange(1 + n * depth, device=device)
    return table, torch.where(j <= m, j, -1)


def _follow(walk: Walk, v: Verified, starts: list[int], out: list[int], rows: list[int],
            cands: dict[int, list[int]], classes: list[int] | None) -> None:
    """The walk on the host, from the outcome read (``out[r]``: row r's accepted column, −1 none): ``walk.paths``
    and ``walk.ends`` per start. ``classes`` (merged on the device): each node's class, whose row it takes;
    the path is then the drafted chain down to the last accepted node, and ``walk.rows`` maps every node."""
    row_of = walk.rows

    def cls(u: int) -> int:
        return u if classes is None or u < 0 else classes[u]

    for start in starts:
        node, path = start, []
        while cls(node) in row_of and out[row_of[cls(node)]] >= 0:
            r = row_of[cls(node)]
            node = cands[rows[r]][out[r]]
            path.append(node)
        if classes is not None and path:  # the drafted chain to the end, below the start's depth
            parents = v.proposal.tree.parents
            path = path_to(parents, node)[len(path_to(parents, start)) if start >= 0 else 0:]
        walk.paths.append(path)
        walk.ends.append(node)
    if classes is not None:  # dead nodes are not drafts (dead target-sampled roots are counted as roots)
        walk.classes = classes
        v.proposal.dtree.n_dead = sum(1 for c in classes[v.proposal.dtree.n_roots:] if c < -1)
        walk.rows = {u: row_of[cls(u)] for u in range(-walk.offset, len(classes)) if cls(u) in row_of}


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
        if u < 0 and not head:
            raise ValueError("the walk needs q̃ at the committed sequence, which this draft did not keep")
        return u + head

    return q_all, row

