"""Tree attention: ONE forward over a token tree, with its mask and positions built, or sliced from ONE
:class:`SlicedTreeMask` of the largest tree (the dynamic sliced topology-aware causal mask, mcsd §3.2, Fig. 2).

* :func:`tree_forward` — stem (committed, uncached tokens) then the flattened tree, in one forward;
* :func:`attention_inputs` — (additive mask, position ids) of a tree, sliced when it is a truncation of
  the sliced mask's tree, built (:func:`~harness.primitives.tree.tree_attention_mask`) otherwise;
* :func:`level_order_parents` / :func:`fork_parents` — the level-ordered trees of a k-config and of a fork.
"""
from __future__ import annotations

import bisect

import torch

from harness.primitives.kv_cache import cache_length
from harness.primitives.tree import (TokenTree, _as_list, ancestor_matrix, check_parents, node_depths, tree_mask_and_positions, with_stem)


def tree_forward(model, cache, stem: torch.Tensor, tree: TokenTree, sliced: SlicedTreeMask | None = None,
                 all_stem: bool = True, return_hidden: bool = False) -> tuple[torch.Tensor, ...]:
    """ONE forward of ``stem`` (1, S) then the flattened tree, with tree attention.

    ``model`` is a :class:`~harness.primitives.forward.CountedModel`. Returns
    ``(stem_logits (S, V), node_logits (N, V))``: stem_logits[-1] is the distribution of the
    tree's roots, node_logits[i] that of node i's children. The cache grows by S + N.
    ``all_stem=False``: stem_logits has the last stem position only (min(S, 1) rows) — the LM head
    is skipped at the others, which at a prefill costs more than the round's drafting.
    ``sliced``: a :class:`SlicedTreeMask` the mask is sliced from when the tree is its tree
    truncated at some depth (mcsd §3.2); otherwise (or without it) the mask is built.
    ``return_hidden``: also the model's last hidden states (after the final norm), same call —
    ``(stem_logits, node_logits, stem_hidden (S, H), node_hidden (N, H))``, every stem position's hidden
    state whatever ``all_stem`` says (the trained heads read them: Medusa's, EAGLE's).
    """
    stem = stem.reshape(1, -1)
    s = stem.size(1)
    prefix_len = cache_length(cache)
    device = stem.device
    ids = torch.cat([stem, tree.tokens.to(device)[None]], dim=1)
    n_stem = s if all_stem else min(s, 1)
    keep = tree.tokens.numel() + n_stem
    if tree.is_chain:  # plain causal attention is the tree mask of a chain
        out = model(ids, cache, keep=keep, return_hidden=return_hidden)
    else:
        dtype = next(model.model.parameters()).dtype
        mask, pos = attention_inputs(tree.parents, prefix_len, stem_len=s, sliced=sliced, dtype=dtype, device=device)
        out = model(ids, cache, position_ids=pos, attention_mask=mask, keep=keep, return_hidden=return_hidden)
    logits = (out[0] if return_hidden else out)[0]
    if return_hidden:
        hidden = out[1][0]
        return logits[:n_stem], logits[n_stem:], hidden[:s], hidden[s:]
    return logits[:n_stem], logits[n_stem:]


def attention_inputs(parents, prefix_len: int, *, stem_len: int = 0, first_node: int = 0,
                     sliced: SlicedTreeMask | None = None, dtype: torch.dtype = torch.float32,
                     device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(additive mask, position ids) of a tree (after ``stem_len`` stem tokens) over ``prefix_len`` cached
    positions, rows from ``first_node`` on (stem rows too when ``stem_len`` > 0).

    Sliced from ``sliced`` (no topology work, mcsd §3.2) when ``parents`` is its tree truncated at a
    depth, or a narrower fork of its fork (:meth:`SlicedTreeMask.shape_of`), and its dtype matches; built by
    :func:`tree_attention_mask` otherwise (e.g. a k-config level left short because the warped distribution had
    fewer tokens than the children asked for).
    """
    if stem_len and first_node:
        raise ValueError(f"first_node > 0 needs stem_len == 0, got first_node={first_node}, stem_len={stem_len}")
    shape = sliced.shape_of(parents) if sliced is not None and sliced.dtype == dtype else None
    if shape is not None and sliced is not None:
        depth, width = shape
        return (sliced.mask(depth, prefix_len, stem_len, first_node, width),
                sliced.position_ids(depth, prefix_len, stem_len, first_node, width))
    full = with_stem(stem_len, parents) if stem_len else list(parents)
    mask, pos = tree_mask_and_positions(full, prefix_len, dtype, device)
    return mask[:, :, first_node:], pos[:, first_node:]


def level_order_parents(k_config) -> list[int]:
    """Parents of the full tree of a k-config, nodes in level (breadth-first) order.

    ``k_config[d]`` children per node at depth d (the roots: ``k_config[0]`` of them). For a
    target-initialised tree (mcsd §3.1) the first entry counts the target-sampled root
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
    """A fork-shaped tree (mcsd §3.2, App. A.1): ``width`` roots, each the head of a chain that
    never branches, ``depth`` levels, in level order (node ``d·width + w`` is sequence w at depth d+1)."""
    if width < 1 or depth < 1:
        raise ValueError(f"a fork needs width >= 1 and depth >= 1, got width={width}, depth={depth}")
    return level_order_parents([width] + [1] * (depth - 1))


def fork_width(parents: list[int]) -> int | None:
    """W where ``parents`` is :func:`fork_parents` (W, D) for some D, else None."""
    width = next((i for i, p in enumerate(parents) if p != -1), len(parents))
    if not width or len(parents) % width or parents[width:] != list(range(len(parents) - width)):
        return None
    return width


def level_masks(widths, dtype: torch.dtype, device) -> SlicedTreeMask | None:
    """The :class:`SlicedTreeMask` of the level-ordered tree of ``widths`` (every node at depth d gets
    ``widths[d]`` children), built once per shape, dtype and device and kept: a drafting loop slices each level's
    mask from it instead of building and copying one per level (issue 28 item 2). A kept mask of deeper widths
    that begin with ``widths`` serves too (the tree of ``widths`` is its truncation: a round cut short at the end
    of a generation builds nothing). None for fewer than 2 levels with no such mask kept (a single level needs no
    tree mask to draft; a target verifying it slices one where there is one)."""
    want, where = tuple(int(w) for w in widths), str(torch.device(device))
    for (kept, kept_dtype, kept_device), mask in _LEVEL_MASKS.items():
        if kept[:len(want)] == want and kept_dtype == dtype and kept_device == where:
            return mask
    if len(widths) < 2:
        return None
    if len(_LEVEL_MASKS) >= 16:
        _LEVEL_MASKS.pop(next(iter(_LEVEL_MASKS)))
    mask = _LEVEL_MASKS[want, dtype, where] = SlicedTreeMask.for_k_config(want, dtype=dtype, device=where)
    return mask


_LEVEL_MASKS: dict[tuple[tuple[int, ...], torch.dtype, str], SlicedTreeMask] = {}


class SlicedTreeMask:
    """A topology-aware causal mask built ONCE for the largest tree and sliced per iteration (mcsd §3.2).

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
        self.fork_width = fork_width(self.parents)  # W where the tree is a fork (fork_parents), else None
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

    def shape_of(self, parents) -> tuple[int, int | None] | None:
        """(depth, None) where ``parents`` is a truncation of this tree (:meth:`depth_of`); (depth, width) where this
        tree is a fork and ``parents`` the fork of its first ``width`` sequences truncated at ``depth`` (a fork whose
        first level was short: its nodes are a strided block of this one's, mcsd §3.2); None otherwise."""
        depth = self.depth_of(parents)
        if depth is not None or self.fork_width is None:
            return None if depth is None else (depth, None)
        plist = _as_list(parents)
        width = fork_width(plist)
        if width is None or width > self.fork_width or len(plist) // width > self.max_depth:
            return None
        return len(plist) // width, width

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

    def mask(self, depth: int, prefix_len: int, stem_len: int = 0, first_node: int = 0,
             width: int | None = None) -> torch.Tensor:
        """Additive (1, 1, R, prefix_len + stem_len + nodes(depth)) mask of the tree truncated at ``depth``.

        Equal to ``tree_attention_mask(with_stem(stem_len, parents_at(depth)), prefix_len)`` (plain
        ``parents_at(depth)`` when ``stem_len`` is 0). ``first_node`` > 0 keeps only the rows of
        nodes ``first_node …`` (a level fed to the draft after the earlier ones are cached: then
        ``prefix_len`` counts the cache before the tree, and there is no stem). ``width`` (a fork): the fork of
        its first ``width`` sequences instead (:meth:`shape_of`), gathered from the same buffer (a copy).
        """
        n = self.nodes(depth) if width is None else depth * width
        if prefix_len < 0 or stem_len < 0:
            raise ValueError(f"prefix_len and stem_len must be >= 0, got {prefix_len}, {stem_len}")
        if first_node and (stem_len or not 0 <= first_node < n):
            raise ValueError(f"first_node must be in [0, {n}) and needs stem_len == 0, got {first_node}, {stem_len}")
        if prefix_len > self.capacity and stem_len <= self.MAX_CACHED_STEM:
            self._grow(prefix_len)
        buf, c = self._buffer(stem_len, prefix_len)
        s = stem_len
        if width is None:
            return buf[first_node:s + n, c - prefix_len:c + s + n][None, None]  # a view: no copy
        assert self.fork_width is not None  # a narrower fork's (shape_of)
        full = self.fork_width * depth
        rows = buf[s:s + full].reshape(depth, self.fork_width, -1)[:, :width].reshape(n, -1)  # level order
        rows = torch.cat([buf[:s], rows])[first_node:] if s else rows[first_node:]
        tree = rows[:, c + s:c + s + full].reshape(rows.size(0), depth, self.fork_width)[:, :, :width]
        return torch.cat([rows[:, c - prefix_len:c + s], tree.reshape(rows.size(0), n)], 1)[None, None]

    def position_ids(self, depth: int, prefix_len: int, stem_len: int = 0, first_node: int = 0,
                     width: int | None = None) -> torch.Tensor:
        """(1, R) position ids of the same rows as :meth:`mask`: equal to :func:`tree_position_ids` of the
        same parents (stem tokens at ``prefix_len …``, node i at ``prefix_len + stem_len + depth_i − 1``)."""
        offsets = self._offsets
        if width is not None:
            assert self.fork_width is not None
            offsets = offsets[:depth * self.fork_width].reshape(depth, self.fork_width)[:, :width].reshape(-1)
        n = self.nodes(depth) if width is None else depth * width
        tree = offsets[first_node:n] + (prefix_len + stem_len)
        if stem_len:
            stem = torch.arange(prefix_len, prefix_len + stem_len, device=tree.device)
            tree = torch.cat([stem, tree])
        return tree[None]
