"""SpecInfer's token-tree merge on the device, at the drafted tree's fixed shape (issue 28 item 2).

SpecInfer merges draft nodes with the same parent and token into one node of the token tree the target scores;
every draw stays a candidate of its own (a duplicate is an i.i.d. draw that happened to coincide), so a merged
node's candidates are the children of all the draft nodes it stands for, in draw order, duplicates included
(specinfer's and mcsd's docstrings; mtad §5). Done on the host, that needs the drafted tokens read every round and
a new tree shape (mask, walk index) uploaded whenever the duplicates change.

Here nothing is removed: the target scores the drafted tree as drafted (level order: its mask is a shape every round
repeats), and the merge is a CLASS per draft node, computed on the device without a read — node i's class is the
first live node j ≤ i of its level whose parent's class and token are i's (equivalently: the same tokens on the path
from the root), every level at once. A duplicate computes the same logits as its class's first node (the same tokens
at the same positions: its ancestors are duplicates too) and nobody reads them: the walk
(:func:`~harness.primitives.tree_walk.walk_tree`) runs a row per node, whose candidates are the next level's nodes
masked to the children of the node's class (all-masked unless the node is its class's first), so a merged node is
one row with the union of its members' children as candidates, in draw order — the host merge's law, exactly.
Children that a short row could not give (draws without replacement, ``draft_tree(defer_invalid=True)``) are dead,
with everything below them: class −2, never a candidate.

With ``distinct`` siblings (greedy top-k, draws without replacement) nothing can merge: the classes are the nodes
themselves (the dead dropped) and each row's candidates are its own children, as drafted.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from harness.primitives.device import host_constant
from harness.primitives.spec_state import DraftTree
from harness.primitives.tree import children_lists, tree_topology

DEAD = -2


@dataclass(frozen=True)
class DeviceMerge:
    """The classes of a drafted tree's nodes, on the device. ``classes`` (N + 1,) long: ``classes[u + 1]`` is the
    class of node u (its first node with the same parent class and token; −2 dead), ``classes[0] = −1`` the
    committed sequence's. ``columns[u]`` (host, static): the nodes that may be candidates at node u (u = −1: the
    roots); which are is :meth:`valid`. ``parent_plus_one`` (N,): each node's parent + 1, on the device."""

    classes: torch.Tensor
    parent_plus_one: torch.Tensor
    columns: dict[int, list[int]]

    def valid(self, nodes: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """(R, K) bool: column c is a candidate at row node u iff u is its class's first node, c is alive and c's
        parent is in u's class. ``nodes`` (R,) the rows' nodes (−1: the committed sequence), ``cols`` (R, K)."""
        c = self.classes
        own = c.index_select(0, nodes + 1) == nodes
        parent_class = c[self.parent_plus_one[cols]]
        return own[:, None] & (parent_class == nodes[:, None]) & (c[cols + 1] >= 0)

    def class_rows(self, node_rows: torch.Tensor, offset: int) -> torch.Tensor:
        """Each node's walk row, that of its class (−1: none, a dead node): ``node_rows[u + offset]`` is node u's own
        row; the result is indexed the same way (``offset`` 1: the committed sequence first)."""
        cls = self.classes[1 - offset:]
        rows = node_rows.index_select(0, (cls + offset).clamp_min(0))
        return torch.where(cls == DEAD, -1, rows)


def merge_on_device(dtree: DraftTree, distinct: bool) -> DeviceMerge:
    """The classes of ``dtree``'s nodes (module docstring): no read, one upload per tree shape (none once seen).
    Two nodes are one class iff they have the same depth and the same tokens on their paths from the root (the
    recursive definition, unrolled), so all levels are merged at once: each node's first such live node."""
    parents = tuple(dtree.parents)
    tokens = dtree.tokens.reshape(-1)
    device, n = tokens.device, len(parents)
    head, depth = _merge_index(parents, distinct)
    index = host_constant(head, device)  # parent + 1; (to merge) ancestors by depth, same-depth-and-earlier
    parent1 = index[:n]
    if distinct:
        alive = _alive(dtree, device)
        own = torch.arange(n, device=device)
        classes = torch.where(alive, own, DEAD) if alive is not None else own
        return DeviceMerge(torch.cat([torch.full((1,), -1, dtype=torch.long, device=device), classes]), parent1,
                           _children(parents))
    ancestors = index[n:n + n * depth].reshape(n, depth)  # node i's ancestor (or itself) at each depth; n: none
    earlier = index[n + n * depth:].reshape(n, n).bool()  # j at i's depth, j <= i
    paths = torch.cat([tokens, tokens.new_full((1,), -1)])[ancestors]  # (n, depth) the path tokens, −1 below
    alive = torch.ones(n, dtype=torch.bool, device=device)
    if dtree.valid is not None:  # a node below an invalid draw is dead too
        alive = torch.cat([dtree.valid, alive[:1]])[ancestors].all(-1)
    same = (paths[:, None, :] == paths[None, :, :]).all(-1) & earlier & alive[None, :]
    first = same.to(torch.int8).argmax(-1)  # the first such j (i itself when alive)
    classes = torch.cat([torch.full((1,), -1, dtype=torch.long, device=device), torch.where(alive, first, DEAD)])
    return DeviceMerge(classes, parent1, _next_levels(parents))


@lru_cache(maxsize=64)
def _merge_index(parents: tuple[int, ...], distinct: bool) -> tuple[tuple[int, ...], int]:
    """The host index of a tree shape (copied once per shape): each node's parent + 1, and unless ``distinct`` its
    ancestor-or-self at each depth 1..D (n where it has none) and whether j is at i's depth with j <= i; and D."""
    n = len(parents)
    head = tuple(p + 1 for p in parents)
    if distinct or not n:
        return head, 0
    chains: list[list[int]] = []
    for i, p in enumerate(parents):  # parents come first
        chains.append((chains[p] if p >= 0 else []) + [i])
    depth = max(len(c) for c in chains)
    ancestors = tuple(x for c in chains for x in c + [n] * (depth - len(c)))
    earlier = tuple(int(len(chains[j]) == len(chains[i]) and j <= i) for i in range(n) for j in range(n))
    return head + ancestors + earlier, depth


def _alive(dtree: DraftTree, device) -> torch.Tensor | None:
    """(N,) bool: the node and all its ancestors are real draws (None: all are)."""
    if dtree.valid is None:
        return None
    ancestors, _ = tree_topology(dtree.parents, device)
    return ~(ancestors & ~dtree.valid[None, :]).any(-1)


@lru_cache(maxsize=64)
def _levels(parents: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The nodes of each depth (1, 2, …), in index (draw) order."""
    if not parents:
        return ()
    depths: list[int] = []
    for p in parents:  # parents come first
        depths.append(1 if p < 0 else depths[p] + 1)
    return tuple(tuple(i for i, d in enumerate(depths) if d == level) for level in range(1, max(depths) + 1))


@lru_cache(maxsize=64)
def _next_levels(parents: tuple[int, ...]) -> dict[int, list[int]]:
    """Every node with a next level (−1: the committed sequence) → that level's nodes (its possible candidates)."""
    levels = _levels(parents)
    out: dict[int, list[int]] = {-1: list(levels[0])} if levels else {}
    for upper, lower in zip(levels, levels[1:]):
        out.update({u: list(lower) for u in upper})
    return out


@lru_cache(maxsize=64)
def _children(parents: tuple[int, ...]) -> dict[int, list[int]]:
    return children_lists(list(parents))
