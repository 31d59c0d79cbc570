"""Token trees and tree attention, written once for every tree method (SpecInfer, MCSD, DSBD forests).

A tree of draft tokens is flattened into a topological order (every parent before its
children; :class:`TokenTree` builds depth-first order) and given to the target model in
ONE forward pass with a topology-aware attention mask: node i attends to the whole cached
prefix, to its ancestors and to itself (dsbd §3.3 and Fig. 3; mcsd §2.2 and
Fig. 1; SpecInfer's tree-based parallel decoding). Its position id is
``prefix_len + depth − 1``, the position it would have in a plain sequence, so that every
node's logits equal those of a sequential forward over its root-to-node path.

``parents[i] == -1`` means node i hangs off the committed prefix; several such roots form
a forest. A *stem* is a short chain of committed tokens that are not yet in the KV cache
(e.g. the token sampled at the end of the previous iteration); it is fed in the same
forward, in front of the tree, whose roots then hang off the stem's last token.

After verification, :func:`commit_path` rolls a KV cache back to the prefix plus the
accepted path (no recompute of the prefix). The forward itself, and masks sliced from one built for the
largest tree, are :mod:`harness.primitives.tree_attention`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import torch

from harness.primitives.device import host_constant
from harness.primitives.kv_cache import keep_positions, truncate


def _as_list(parents) -> list[int]:
    if isinstance(parents, torch.Tensor):
        return parents.tolist()
    return [int(p) for p in parents]


def check_parents(parents) -> list[int]:
    """Validate a parent array (parent index < own index, −1 for roots); returns it as a list."""
    plist = _as_list(parents)
    for i, p in enumerate(plist):
        if not -1 <= p < i:
            raise ValueError(f"node {i} has parent {p}: parents must be -1 (root) or an earlier node index")
    return plist


def node_depths(parents, device=None) -> torch.Tensor:
    """Depth of every node (roots have depth 1): (N,) long, on ``device``."""
    plist = check_parents(parents)
    depth = [0] * len(plist)
    for i, p in enumerate(plist):
        depth[i] = 1 if p < 0 else depth[p] + 1
    return torch.tensor(depth, dtype=torch.long, device=device)


def path_to(parents, node: int) -> list[int]:
    """Node indices from the root down to ``node`` (inclusive)."""
    plist = _as_list(parents)
    path = []
    while node >= 0:
        path.append(node)
        node = plist[node]
    return path[::-1]


def ancestor_matrix(parents, device=None) -> torch.Tensor:
    """(N, N) bool: ``A[i, j]`` is True iff node j is node i or one of its ancestors."""
    return tree_topology(parents, device)[0]


def tree_topology(parents, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(:func:`ancestor_matrix`, :func:`node_depths`) of a tree, built on the host, where the parents are, and
    copied to ``device`` in ONE transfer (no per-level reads of device values: issue 28 item 2)."""
    plist = check_parents(parents)
    n = len(plist)
    rows: list[tuple[int, ...]] = []
    for i, p in enumerate(plist):  # parents come first: a node's row is its parent's plus itself, depth last
        row = list(rows[p]) if p >= 0 else [0] * (n + 1)
        row[i], row[n] = 1, row[n] + 1
        rows.append(tuple(row))
    both = host_constant(tuple(rows), device).reshape(n, n + 1)  # a tree shape seen before: no copy
    return both[:, :n].bool(), both[:, n]


def tree_attention_mask(parents, prefix_len: int, dtype: torch.dtype = torch.float32,
                        device=None) -> torch.Tensor:
    """Additive 4-D mask (1, 1, N, prefix_len + N): 0 where node i may attend, dtype-min elsewhere.

    Node i sees all ``prefix_len`` cached positions, its ancestors and itself (topology-aware
    causal mask). HF models take it as ``attention_mask`` unchanged (a 4-D mask is used as is).
    """
    return tree_mask_and_positions(parents, prefix_len, dtype, device)[0]


def tree_mask_and_positions(parents, prefix_len: int, dtype: torch.dtype = torch.float32,
                            device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(:func:`tree_attention_mask`, :func:`tree_position_ids`) of the same tree, from one host-to-device copy."""
    allowed, depths = tree_topology(parents, device)
    return _additive_mask(allowed, prefix_len, dtype), (depths + (prefix_len - 1))[None]


def _additive_mask(allowed: torch.Tensor, prefix_len: int, dtype: torch.dtype) -> torch.Tensor:
    device = allowed.device
    n = allowed.size(0)
    mask = torch.zeros((n, prefix_len + n), dtype=dtype, device=device)
    mask[:, prefix_len:].masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def tree_position_ids(parents, prefix_len: int, device=None) -> torch.Tensor:
    """(1, N) position ids: ``prefix_len + depth − 1`` for every node."""
    return (node_depths(parents, device) + (prefix_len - 1))[None]


def with_stem(stem_len: int, parents) -> list[int]:
    """Parents of ``stem_len`` chained tokens followed by the tree (roots hang off the stem's end)."""
    plist = check_parents(parents)
    stem = list(range(-1, stem_len - 1))
    root_parent = stem_len - 1
    return stem + [p + stem_len if p >= 0 else root_parent for p in plist]


@dataclass
class TokenTree:
    """Draft tokens with parent links, in topological (depth-first when built here) order.

    ``tokens`` (N,) long; ``parents`` list of N ints, −1 for a root (child of the committed prefix).
    """

    tokens: torch.Tensor
    parents: list[int]
    _depths: torch.Tensor | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        self.parents = check_parents(self.parents)
        if self.tokens.dim() != 1 or self.tokens.numel() != len(self.parents):
            raise ValueError(f"tokens must be 1-D with one entry per parent, got shape {tuple(self.tokens.shape)} "
                             f"for {len(self.parents)} parents")

    def __len__(self) -> int:
        return len(self.parents)

    @property
    def depths(self) -> torch.Tensor:
        if self._depths is None:
            self._depths = node_depths(self.parents)
        return self._depths

    def children(self, node: int) -> list[int]:
        """Children of ``node`` in order (node −1: the roots)."""
        return [i for i, p in enumerate(self.parents) if p == node]

    def path(self, node: int) -> list[int]:
        return path_to(self.parents, node)

    def path_tokens(self, node: int) -> list[int]:
        return self.tokens[self.path(node)].tolist()

    def attention_mask(self, prefix_len: int, dtype=torch.float32, device=None) -> torch.Tensor:
        return tree_attention_mask(self.parents, prefix_len, dtype, device)

    def position_ids(self, prefix_len: int, device=None) -> torch.Tensor:
        return tree_position_ids(self.parents, prefix_len, device)

    @classmethod
    def chain(cls, tokens: torch.Tensor) -> TokenTree:
        """A single path (vanilla speculative decoding's draft)."""
        return cls(tokens.reshape(-1), list(range(-1, tokens.numel() - 1)))

    @classmethod
    def depth_first(cls, tokens: torch.Tensor | list[int], parents, device=None) -> tuple[TokenTree, list[int]]:
        """Reorder any topologically ordered tree (e.g. drafted level by level) depth-first.

        ``tokens``: on the device, or a host list (then copied once, reordered, to ``device``). Returns the tree and
        ``new_index`` (a host list, N): the depth-first index of each input node. Children keep their relative order.
        """
        plist = check_parents(parents)
        kids: list[list[int]] = [[] for _ in range(len(plist) + 1)]  # kids[-1] = roots
        for i, p in enumerate(plist):
            kids[p].append(i)
        order: list[int] = []
        stack = kids[-1][::-1]
        while stack:
            node = stack.pop()
            order.append(node)
            stack.extend(kids[node][::-1])
        new_index = [0] * len(order)
        for new, old in enumerate(order):
            new_index[old] = new
        new_parents = [new_index[plist[old]] if plist[old] >= 0 else -1 for old in order]
        if not isinstance(tokens, torch.Tensor):
            return cls(torch.tensor([tokens[o] for o in order], dtype=torch.long, device=device), new_parents), new_index
        perm = torch.tensor(order, dtype=torch.long, device=tokens.device)
        return cls(tokens[perm], new_parents), new_index

    @property
    def is_chain(self) -> bool:
        return self.parents == list(range(-1, len(self.parents) - 1))


def children_lists(parents) -> dict[int, list[int]]:
    """Children of every node with any, in index order; key −1: the roots."""
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(_as_list(parents)):
        kids.setdefault(p, []).append(i)
    return kids


def commit_path(cache, keep_len: int, path_positions, parents=None) -> None:
    """Roll ``cache`` back to its first ``keep_len`` positions plus ``path_positions`` (ascending).

    ``path_positions`` are absolute cache positions of the accepted nodes (e.g. ``keep_len + node``);
    a contiguous path is a plain truncation, anything else keeps the selected positions, whose index is made on the
    device without a host-to-device copy where it can be (:func:`path_index`; ``parents``: the tree's, whose nodes
    the positions are below ``keep_len``).
    """
    path = [int(p) for p in path_positions]
    if path == list(range(keep_len, keep_len + len(path))):
        truncate(cache, keep_len + len(path))
        return
    device = cache.layers[0].keys.device if getattr(cache, "layers", None) else None
    below = path_index([p - keep_len for p in path], parents, device)
    keep_positions(cache, torch.cat([torch.arange(keep_len, device=below.device), below + keep_len]))


def path_index(nodes: list[int], parents=None, device=None) -> torch.Tensor:
    """``nodes`` (ascending) as a long tensor on ``device``, with no host-to-device copy where the nodes are evenly
    spaced (a fork's sequence: an ``arange``) or are a root chain of the tree ``parents`` (a row of its
    :func:`chain_table`, copied once per tree shape); otherwise copied once per distinct path (issue 28 item 2)."""
    step = nodes[1] - nodes[0] if len(nodes) > 1 else 1
    if step > 0 and nodes == list(range(nodes[0], nodes[-1] + 1, step)):
        return torch.arange(nodes[0], nodes[-1] + 1, step, device=device)
    if parents is not None and path_to(parents, nodes[-1]) == nodes:
        return chain_table(tuple(parents), str(torch.device(device)) if device is not None else "cpu")[
            nodes[-1], :len(nodes)]
    return host_constant(tuple(nodes), device)


@lru_cache(maxsize=64)
def chain_table(parents: tuple[int, ...], device: str) -> torch.Tensor:
    """(N, depth) long on ``device``: row u is the root chain of node u (root first, :func:`path_to`), padded with 0;
    one copy per tree shape, kept (never modify it)."""
    chains = [path_to(parents, u) for u in range(len(parents))]
    depth = max(map(len, chains), default=0)
    return host_constant(tuple(tuple(c + [0] * (depth - len(c))) for c in chains), device)
