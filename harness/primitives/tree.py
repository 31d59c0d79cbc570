"""Token trees and tree attention, written once for every tree method (SpecInfer, MCSD, DSBD forests).

A tree of draft tokens is flattened into a topological order (every parent before its
children; :class:`TokenTree` builds depth-first order) and given to the target model in
ONE forward pass with a topology-aware attention mask: node i attends to the whole cached
prefix, to its ancestors and to itself (seed 000 §3.3 and Fig. 3; seed 003 §2.2 and
Fig. 1; SpecInfer's tree-based parallel decoding). Its position id is
``prefix_len + depth − 1``, the position it would have in a plain sequence, so that every
node's logits equal those of a sequential forward over its root-to-node path.

``parents[i] == -1`` means node i hangs off the committed prefix; several such roots form
a forest. A *stem* is a short chain of committed tokens that are not yet in the KV cache
(e.g. the token sampled at the end of the previous iteration); it is fed in the same
forward, in front of the tree, whose roots then hang off the stem's last token.

After verification, :func:`commit_path` rolls a KV cache back to the prefix plus the
accepted path (no recompute of the prefix).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import torch

from harness.primitives.kv_cache import cache_length, keep_positions, truncate


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


def node_depths(parents) -> torch.Tensor:
    """Depth of every node (roots have depth 1): (N,) long."""
    plist = check_parents(parents)
    depth = [0] * len(plist)
    for i, p in enumerate(plist):
        depth[i] = 1 if p < 0 else depth[p] + 1
    return torch.tensor(depth, dtype=torch.long)


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
    plist = check_parents(parents)
    n = len(plist)
    par = torch.tensor(plist, dtype=torch.long, device=device)
    anc = torch.eye(n, dtype=torch.bool, device=device)
    rows = torch.arange(n, device=device)
    cur = par.clone()
    while n and bool((cur >= 0).any()):  # pointer jumping, one step per tree level
        live = cur >= 0
        anc[rows[live], cur[live]] = True
        cur = torch.where(live, par[cur.clamp_min(0)], cur)
    return anc


def tree_attention_mask(parents, prefix_len: int, dtype: torch.dtype = torch.float32,
                        device=None) -> torch.Tensor:
    """Additive 4-D mask (1, 1, N, prefix_len + N): 0 where node i may attend, dtype-min elsewhere.

    Node i sees all ``prefix_len`` cached positions, its ancestors and itself (topology-aware
    causal mask). HF models take it as ``attention_mask`` unchanged (a 4-D mask is used as is).
    """
    allowed = ancestor_matrix(parents, device)
    n = allowed.size(0)
    mask = torch.zeros((n, prefix_len + n), dtype=dtype, device=device)
    mask[:, prefix_len:].masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def tree_position_ids(parents, prefix_len: int, device=None) -> torch.Tensor:
    """(1, N) position ids: ``prefix_len + depth − 1`` for every node."""
    return (node_depths(parents).to(device) + (prefix_len - 1))[None]


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
    def from_sequences(cls, sequences: torch.Tensor) -> tuple[TokenTree, torch.Tensor]:
        """Merge m draft sequences (m, γ) into a prefix tree in depth-first order.

        Returns the tree and ``node_of`` (m, γ): the node holding ``sequences[j, d]``. Sequences
        sharing a prefix share its nodes (SpecInfer's token-tree merge), so the target verifies
        each distinct prefix once.
        """
        seqs = sequences.tolist()
        m = len(seqs)
        gamma = len(seqs[0]) if m else 0
        trie: dict[tuple[int, ...], int] = {}
        order: list[tuple[int, ...]] = []
        for seq in sorted(set(map(tuple, seqs))):  # sorted prefixes → depth-first order
            for d in range(1, gamma + 1):
                if seq[:d] not in trie:
                    trie[seq[:d]] = len(order)
                    order.append(seq[:d])
        tokens = torch.tensor([key[-1] for key in order], dtype=torch.long, device=sequences.device)
        parents = [trie[key[:-1]] if len(key) > 1 else -1 for key in order]
        node_of = torch.tensor([[trie[tuple(s[: d + 1])] for d in range(gamma)] for s in seqs], dtype=torch.long)
        return cls(tokens, parents), node_of.reshape(m, gamma)

    @classmethod
    def depth_first(cls, tokens: torch.Tensor, parents) -> tuple[TokenTree, torch.Tensor]:
        """Reorder any topologically ordered tree (e.g. drafted level by level) depth-first.

        Returns the tree and ``new_index`` (N,): the depth-first index of each input node.
        Children keep their relative order.
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
        perm = torch.tensor(order, dtype=torch.long, device=tokens.device)
        return cls(tokens[perm], new_parents), torch.tensor(new_index, dtype=torch.long)

    @classmethod
    def from_levels(cls, level_tokens: list[torch.Tensor], level_parents: list[torch.Tensor]) -> tuple[TokenTree,
                                                                                                       torch.Tensor]:
        """Build from breadth-first levels (as drafted level by level), ordered depth-first.

        ``level_tokens[d]`` (n_d,) tokens at depth d+1; ``level_parents[d]`` (n_d,) index of each one's
        parent within level d (ignored for d = 0: all roots). Returns the tree and ``dfs_of_bfs``
        (N,): the depth-first index of each node in breadth-first (concatenated levels) order.
        """
        offsets = [0]
        for t in level_tokens:
            offsets.append(offsets[-1] + t.numel())
        bfs_parent = [-1] * level_tokens[0].numel()
        for d in range(1, len(level_tokens)):
            bfs_parent += [offsets[d - 1] + int(p) for p in level_parents[d].tolist()]
        return cls.depth_first(torch.cat(level_tokens), bfs_parent)

    @property
    def is_chain(self) -> bool:
        return self.parents == list(range(-1, len(self.parents) - 1))


def tree_forward(model, cache, stem: torch.Tensor, tree: TokenTree,
                 sliced: SlicedTreeMask | None = None, all_stem: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """ONE forward of ``stem`` (1, S) then the flattened tree, with tree attention.

    ``model`` is a :class:`~harness.primitives.forward.CountedModel`. Returns
    ``(stem_logits (S, V), node_logits (N, V))``: stem_logits[-1] is the distribution of the
    tree's roots, node_logits[i] that of node i's children. The cache grows by S + N.
    ``all_stem=False``: stem_logits has the last stem position only (min(S, 1) rows) — the LM head
    is skipped at the others, which at a prefill costs more than the round's drafting.
    ``sliced``: a :class:`SlicedTreeMask` the mask is sliced from when the tree is its tree
    truncated at some depth (seed 003 §3.2); otherwise (or without it) the mask is built.
    """
    stem = stem.reshape(1, -1)
    s = stem.size(1)
    prefix_len = cache_length(cache)
    device = stem.device
    ids = torch.cat([stem, tree.tokens.to(device)[None]], dim=1)
    n_stem = s if all_stem else min(s, 1)
    keep = tree.tokens.numel() + n_stem
    if tree.is_chain:  # plain causal attention is the tree mask of a chain
        logits = model(ids, cache, keep=keep)[0]
    else:
        dtype = next(model.model.parameters()).dtype
        mask, pos = attention_inputs(tree.parents, prefix_len, stem_len=s, sliced=sliced, dtype=dtype, device=device)
        logits = model(ids, cache, position_ids=pos, attention_mask=mask, keep=keep)[0]
    return logits[:n_stem], logits[n_stem:]


def attention_inputs(parents, prefix_len: int, *, stem_len: int = 0, first_node: int = 0,
                     sliced: SlicedTreeMask | None = None, dtype: torch.dtype = torch.float32,
                     device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(additive mask, position ids) of a tree (after ``stem_len`` stem tokens) over ``prefix_len`` cached
    positions, rows from ``first_node`` on (stem rows too when ``stem_len`` > 0).

    Sliced from ``sliced`` (no topology work, seed 003 §3.2) when ``parents`` is its tree truncated at a
    depth and its dtype matches; built by :func:`tree_attention_mask` otherwise (e.g. a level left short
    because the warped distribution had fewer tokens than the children asked for).
    """
    if stem_len and first_node:
        raise ValueError(f"first_node > 0 needs stem_len == 0, got first_node={first_node}, stem_len={stem_len}")
    depth = sliced.depth_of(parents) if sliced is not None and sliced.dtype == dtype else None
    if depth is not None:
        return (sliced.mask(depth, prefix_len, stem_len, first_node),
                sliced.position_ids(depth, prefix_len, stem_len, first_node))
    full = with_stem(stem_len, parents) if stem_len else list(parents)
    return (tree_attention_mask(full, prefix_len, dtype, device)[:, :, first_node:],
            tree_position_ids(full, prefix_len, device)[:, first_node:])


def children_lists(parents) -> dict[int, list[int]]:
    """Children of every node with any, in index order; key −1: the roots."""
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(_as_list(parents)):
        kids.setdefault(p, []).append(i)
    return kids


def commit_path(cache, keep_len: int, path_positions) -> None:
    """Roll ``cache`` back to its first ``keep_len`` positions plus ``path_positions`` (ascending).

    ``path_positions`` are absolute cache positions of the accepted nodes (e.g. ``keep_len + node``);
    a contiguous path is a plain truncation, anything else keeps the selected positions.
    """
    path = [int(p) for p in path_positions]
    if path == list(range(keep_len, keep_len + len(path))):
        truncate(cache, keep_len + len(path))
        return
    device = cache.layers[0].keys.device if getattr(cache, "layers", None) else None
    keep = torch.cat([torch.arange(keep_len), torch.tensor(path, dtype=torch.long)]).to(device)
    keep_positions(cache, keep)


# ---------------------------------------------------------------------------------------------
# Dynamic sliced topology-aware causal mask (seed 003 §3.2, Fig. 2)
# ---------------------------------------------------------------------------------------------

def level_order_parents(k_config) -> list[int]:
    """Parents of the full tree of a k-config, nodes in level (breadth-first) order.

    ``k_config[d]`` children per node at depth d (the roots: ``k_config[0]`` of them). For a
    target-initialised tree (seed 003 §3.1) the first entry counts the target-sampled root
    tokens, e.g. (2, 4, 3, 1, 1): 2 + 8 + 24 + 24 + 24 = 82 nodes, (2 + 2·40)² mask entries
    as §3.1 sizes it. A node's children follow each other, siblings keep their parents' order.
    """
    widths = [int(k) for k in k_config]
    if not widths or min(widths) < 1:
        raise ValueError(f"k_config must be a non-empty list of positive integers, got {list(k_config)!r}")
    parents: list[int] = []
    level = [-1]
    for k in widths:
        first = len(parents)
        parents.extend(p for p in level for _ in range(k))
        level = list(range(first, len(parents)))
    return parents


def fork_parents(width: int, depth: int) -> list[int]:
    """A fork-shaped tree (seed 003 §3.2, App. A.1): ``width`` roots, each the head of a chain that
    never branches, ``depth`` levels, in level order (node ``d·width + w`` is sequence w at depth d+1)."""
    if width < 1 or depth < 1:
        raise ValueError(f"a fork needs width >= 1 and depth >= 1, got width={width}, depth={depth}")
    return level_order_parents([width] + [1] * (depth - 1))


class SlicedTreeMask:
    """A topology-aware causal mask built ONCE for the largest tree and sliced per iteration (seed 003 §3.2).

    ``parents`` describes the largest tree (maximum depth D) in level order: every node of depth d
    comes after all nodes of depth < d (:func:`fork_parents`, :func:`level_order_parents`). Then the
    tree truncated at depth d ≤ D — what a drafting loop that stops early at turn d has built — is
    the first ``nodes(d)`` nodes, and its ancestor matrix is the top-left ``nodes(d)`` square of the
    full one (Fig. 2: upper-left 3×3 for a stop at the first turn of a W = 3 fork, the whole 9×9
    without early stop). Nothing about the topology is recomputed per iteration.

    :meth:`mask` returns exactly what :func:`tree_attention_mask` builds for the same truncated tree
    (with :func:`with_stem` in front when ``stem_len`` > 0), as a view of a pre-built buffer where it
    can: the buffer holds ``capacity`` all-visible prefix columns followed by the stem's causal block
    and the tree's block, so that any prefix length ≤ capacity is a column offset. The buffer grows
    (doubling) when the cached prefix outgrows it. Views are only valid until the next call that
    grows the buffer; the model call consumes them at once, as a decoding loop does.
    """

    MAX_CACHED_STEM = 4  # buffers are kept for stems of up to this many tokens (a decoder's usual 1)

    def __init__(self, parents, dtype: torch.dtype = torch.float32, device=None, capacity: int = 256):
        self.parents = check_parents(parents)
        if not self.parents:
            raise ValueError("a sliced tree mask needs at least one node")
        depths = node_depths(self.parents)
        if bool((depths[1:] < depths[:-1]).any()):
            raise ValueError("parents must be in level order (every node after all shallower nodes); "
                             "see fork_parents / level_order_parents")
        self.dtype, self.device = dtype, device
        self.max_depth = int(depths[-1])
        counts = torch.bincount(depths, minlength=self.max_depth + 1)[1:]
        self._ends = [0] + torch.cumsum(counts, 0).tolist()  # nodes(d) = self._ends[d]
        self._allowed = ancestor_matrix(self.parents, device)
        self._offsets = (depths - 1).to(device)  # position offset of every node below the tree's base
        self.capacity = 0
        self._buffers: dict[int, torch.Tensor] = {}
        self._grow(capacity)

    @classmethod
    def fork(cls, width: int, depth: int, **kwargs) -> SlicedTreeMask:
        return cls(fork_parents(width, depth), **kwargs)

    @classmethod
    def for_k_config(cls, k_config, **kwargs) -> SlicedTreeMask:
        return cls(level_order_parents(k_config), **kwargs)

    def __len__(self) -> int:
        return len(self.parents)

    def nodes(self, depth: int) -> int:
        """Number of nodes of the tree truncated at ``depth`` (1 ≤ depth ≤ max_depth)."""
        if not 1 <= depth <= self.max_depth:
            raise ValueError(f"depth must be in [1, {self.max_depth}], got {depth}")
        return self._ends[depth]

    def parents_at(self, depth: int) -> list[int]:
        """Parent array of the tree truncated at ``depth`` (a prefix of :attr:`parents`)."""
        return self.parents[: self.nodes(depth)]

    def depth_of(self, parents) -> int | None:
        """The depth d with ``parents == parents_at(d)``, or None when ``parents`` is not a truncation of this tree."""
        plist = _as_list(parents)
        n = len(plist)
        if n == 0 or n > len(self.parents):
            return None
        depth = bisect.bisect_left(self._ends, n)
        if self._ends[depth] != n or self.parents[:n] != plist:
            return None
        return depth

    def _grow(self, capacity: int) -> None:
        self.capacity = max(int(capacity), 2 * self.capacity, 1)
        self._buffers = {}

    def _buffer(self, stem_len: int, prefix_len: int) -> tuple[torch.Tensor, int]:
        """(S + N, C + S + N) additive mask and C: rows of the stem then the tree; C visible prefix columns,
        then the stem's S, then the tree's N. Kept for short stems (C = capacity); built to measure
        (C = prefix_len) for a long one, e.g. a prompt fed in the first iteration."""
        cached = stem_len <= self.MAX_CACHED_STEM
        buf = self._buffers.get(stem_len) if cached else None
        c = self.capacity if cached else prefix_len
        if buf is None:
            n, s = len(self.parents), stem_len
            low = torch.finfo(self.dtype).min
            buf = torch.zeros((s + n, c + s + n), dtype=self.dtype, device=self.device)
            if s:
                buf[:s, c:].fill_(low)
                buf[:s, c:c + s].masked_fill_(torch.ones(s, s, dtype=torch.bool, device=self.device).tril(), 0.0)
            buf[s:, c + s:].masked_fill_(~self._allowed, low)
            if cached:
                self._buffers[stem_len] = buf
        return buf, c

    def mask(self, depth: int, prefix_len: int, stem_len: int = 0, first_node: int = 0) -> torch.Tensor:
        """Additive (1, 1, R, prefix_len + stem_len + nodes(depth)) mask of the tree truncated at ``depth``.

        Equal to ``tree_attention_mask(with_stem(stem_len, parents_at(depth)), prefix_len)`` (plain
        ``parents_at(depth)`` when ``stem_len`` is 0). ``first_node`` > 0 keeps only the rows of
        nodes ``first_node …`` (a level fed to the draft after the earlier ones are cached: then
        ``prefix_len`` counts the cache before the tree, and there is no stem).
        """
        n = self.nodes(depth)
        if prefix_len < 0 or stem_len < 0:
            raise ValueError(f"prefix_len and stem_len must be >= 0, got {prefix_len}, {stem_len}")
        if first_node and (stem_len or not 0 <= first_node < n):
            raise ValueError(f"first_node must be in [0, {n}) and needs stem_len == 0, got {first_node}, {stem_len}")
        if prefix_len > self.capacity and stem_len <= self.MAX_CACHED_STEM:
            self._grow(prefix_len)
        buf, c = self._buffer(stem_len, prefix_len)
        s = stem_len
        return buf[first_node:s + n, c - prefix_len:c + s + n][None, None]  # a view: no copy

    def position_ids(self, depth: int, prefix_len: int, stem_len: int = 0, first_node: int = 0) -> torch.Tensor:
        """(1, R) position ids of the same rows as :meth:`mask`: equal to :func:`tree_position_ids` of the
        same parents (stem tokens at ``prefix_len …``, node i at ``prefix_len + stem_len + depth_i − 1``)."""
        n = self.nodes(depth)
        tree = self._offsets[first_node:n] + (prefix_len + stem_len)
        if stem_len:
            stem = torch.arange(prefix_len, prefix_len + stem_len, device=tree.device)
            tree = torch.cat([stem, tree])
        return tree[None]
