"""SpecInfer's token-tree merge on the device, at the drafted tree's fixed shape (issue 28 item 2).

SpecInfer merges draft nodes with the same parent and token into one node of the token tree the target scores;
every draw stays a candidate of its own (a duplicate is an i.i.d. draw that happened to coincide), so a merged
node's candidates are the children of all the draft nodes it stands for, in draw order, duplicates included
(specinfer's and mcsd's docstrings; mtad §5). Done on the host, that needs the drafted tokens read every round and
a new tree shape (mask, walk index) uploaded whenever the duplicates change.

Here nothing is removed: the target scores the drafted tree as drafted (level order: its mask is a shape every
round repeats), and the merge is a CLASS per draft node, computed on the device level by level — node i's class is
the first node j ≤ i of its level whose parent's class and token are i's — without a read. A duplicate computes
the same logits as its class's first node (the same tokens at the same positions: its ancestors are duplicates
too) and nobody reads them: the walk (:func:`~harness.primitives.tree_walk.walk_tree`) runs a row per node, whose
candidates are the next level's nodes masked to the children of the node's class (all-masked unless the node is
its class's first), so a merged node is one row with the union of its members' children as candidates, in draw
order — the host merge's law, exactly. Children that a short row could not give (draws without replacement,
``draft_tree(defer_invalid=True)``) are dead, with everything below them: class −2, never a candidate.

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
    """The classes of ``dtree``'s nodes (module docstring): no read, one upload per tree shape (none once seen)."""
    parents = tuple(dtree.parents)
    tokens = dtree.tokens.reshape(-1)
    device = tokens.device
    n = len(parents)
    levels = () if distinct else _levels(parents)
    # one upload per shape: each node's parent + 1, then (to merge) the nodes level by level
    index = host_constant(tuple(p + 1 for p in parents) + tuple(u for level in levels for u in level), device)
    parent1, order = index[:n], index[n:]
    if distinct:
        alive = _alive(dtree, device)
        own = torch.arange(n, device=device)
        classes = torch.where(alive, own, DEAD) if alive is not None else own
        return DeviceMerge(torch.cat([torch.full((1,), -1, dtype=torch.long, device=device), classes]), parent1,
                           _children(parents))
    classes = torch.full((n + 1,), -1, dtype=torch.long, device=device)
    start = 0
    for level in levels:
        idx = order[start:start + len(level)]
        start += len(level)
        parent_class = classes.index_select(0, parent1.index_select(0, idx))
        alive = parent_class != DEAD
        if dtree.valid is not None:
            alive = alive & dtree.valid.index_select(0, idx)
        tok = tokens.index_select(0, idx)
        earlier = torch.ones(len(level), len(level), dtype=torch.bool, device=device).tril()  # j <= i
        same = ((parent_class[:, None] == parent_class[None, :]) & (tok[:, None] == tok[None, :]) & alive[None, :]
                & earlier)
        first = same.to(torch.int8).argmax(-1)  # the first such j (i itself when alive)
        classes.index_copy_(0, idx + 1, torch.where(alive, idx.index_select(0, first), DEAD))
    return DeviceMerge(classes, parent1, _next_levels(parents))


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
