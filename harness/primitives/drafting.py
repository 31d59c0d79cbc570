"""Drafting token trees with the draft model's KV cache, and merging duplicate draws.

* :func:`draft_tree` — the draft model proposes a token tree level by level (one draft forward
  per level, tree attention inside the level); a chain (vanilla SD), m i.i.d. sequences
  (SpecInfer/Spectr: widths (m, 1, …, 1)) and a per-depth k-config (MCSD: e.g. (4, 2, 2, 1)) are
  all width lists; optionally below roots the caller gives (target-initialised trees), with masks
  sliced from one :class:`~harness.primitives.tree.SlicedTreeMask` and a per-turn stop hook
  (:class:`DraftStop`) (mcsd §3.1-3.3);
* :func:`draw_children` — the children of every frontier node: greedy top-k, i.i.d. draws, or
  draws without replacement (Gumbel-top-k);
* :class:`Proposal` — a round's draft as the target verifies it: the draft tree itself, with
  :func:`merge_duplicates` identical sibling prefixes merged on the device (SpecInfer's token-tree merge,
  :mod:`~harness.primitives.tree_merge`), each draw staying a candidate of its own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from harness.primitives.kv_cache import cache_length
from harness.primitives.sampling import sample
from harness.primitives.spec_state import DraftTree, SpeculativeCaches
from harness.primitives.tree import TokenTree, children_lists
from harness.primitives.tree_attention import SlicedTreeMask, attention_inputs
from harness.primitives.tree_merge import DeviceMerge, merge_on_device
from harness.primitives.warping import Warp


def draw_children(probs: torch.Tensor, logits: torch.Tensor, k: int, warp: Warp, replacement: bool,
                  generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """k children for each of F frontier nodes: (F, k) tokens and a (F, k) validity mask (None: all valid).

    Greedy: the k most likely draft tokens. With replacement: k i.i.d. draws from T∘q.
    Without: Gumbel-top-k, i.e. sequential draws without replacement in draw order; a row
    with fewer than k tokens in its support gets fewer valid children.
    """
    k = min(k, logits.size(-1))
    if warp.is_greedy:  # argmax for one child: as HF's greedy, and far cheaper than topk over a large vocab on CPU
        return (logits.argmax(-1, keepdim=True) if k == 1 else torch.topk(logits, k, dim=-1).indices), None
    if replacement or k == 1:
        return sample(probs, generator, k), None
    u = torch.rand(probs.shape, generator=generator, device=probs.device).clamp_min(1e-30)
    keys = torch.log(probs) - torch.log(-torch.log(u))
    top = torch.topk(keys, k, dim=-1)
    return top.indices, top.values > float("-inf")


class DraftStop(Protocol):
    """A per-turn stop hook of dynamic drafting (mcsd §3.2-3.3, Fig. 2).

    Called after draft turn ``depth``'s forward (1 ≤ depth < the round's depth) with that level's rows:
    ``hidden`` (F, H) the draft's last hidden states at the level's tokens (None unless
    ``needs_hidden``) and ``logits`` (F, V) the draft's logits there (the next tokens' distribution).
    True ends the round's drafting at ``depth`` — or, where the hook sets ``draws_one_more`` (optional, default
    False), at ``depth + 1``: the next level is drawn from the logits at hand and not fed (SpecDec++'s
    order: the forward that reads candidate d yields the distribution candidate d + 1 is drawn from, then the
    rule decides). It must decide from these alone — never from tokens not yet drawn — so that the tree's
    shape is a stopping time and verification stays exact.
    """

    needs_hidden: bool

    def __call__(self, depth: int, hidden: torch.Tensor | None, logits: torch.Tensor) -> bool: ...


def draft_tree(draft, caches: SpeculativeCaches, widths: list[int], warp: Warp, generator,
               replacement: bool = True, *, roots: torch.Tensor | None = None, masks: SlicedTreeMask | None = None,
               stop: DraftStop | None = None, defer_invalid: bool = False,
               roots_valid: torch.Tensor | None = None, read_level: int | None = None) -> DraftTree:
    """Draft ``len(widths)`` levels: every node at depth d gets ``widths[d]`` children, in exactly ``len(widths)``
    draft forwards (the pending tokens → the root distribution, then each level but the last, one forward per
    level with tree attention). The draft cache grows by the pending tokens and every non-last-level node; the
    caller rolls it back (:func:`~harness.primitives.spec_state.commit_draft`). No widths (γ = 0): no forward.

    Options (mcsd; nodes in level order, so node i's q is ``node_q[i]``): ``roots`` (n,), first-level tokens
    given by the caller (target-initialised trees, §3.1; parents −1, no ``root_q``), fed with the pending tokens,
    ``widths`` being the draft's levels below them (no widths: the draft does not run); ``masks``, a
    :class:`~harness.primitives.tree_attention.SlicedTreeMask` of the largest level-ordered tree, sliced for
    each level when the tree so far is its truncation (§3.2); ``stop``, a :class:`DraftStop` asked after each
    draft level's forward but the last, ending the tree at that level (then ``num_fed`` = all nodes);
    ``defer_invalid`` (``read_level``: every level but that one): children a short row lacks (no replacement)
    stay, dead, in ``DraftTree.valid`` (no read), and :func:`merge_duplicates` masks them out of the walk; level
    ``read_level``'s one read compacts it and drops the dead nodes' children; the stop hook ignores dead rows;
    ``roots_valid`` (n,) bool on the device: which ``roots`` are real draws (the others are dead)."""
    device = caches.draft_pending.device
    if not widths:
        return _roots_only(roots, device)
    greedy = warp.is_greedy
    want_hidden = stop is not None and stop.needs_hidden
    roots = roots.reshape(-1).to(device) if roots is not None else None
    n = 0 if roots is None else roots.numel()
    tokens, parents, frontier = ([], [], [-1]) if roots is None else ([roots], [-1] * n, list(range(n)))
    levels = len(tokens)
    logits, base = _first_forward(draft, caches, roots, masks)
    probs = None if greedy else warp.probs(logits)
    root_q = None if greedy or roots is not None else probs[0]
    fed_q: list[torch.Tensor] = [probs] if roots is not None and not greedy else []
    stopped = last = False
    valid: list[torch.Tensor | None] = [roots_valid] * len(tokens)  # per level: which are real (None: all)
    alive = roots_valid
    for depth, k in enumerate(widths):
        kids, owner, alive = _draw_level(probs, logits, frontier, k, warp, replacement, generator,
                                         defer_invalid or read_level not in (None, depth), alive)
        valid.append(alive)
        first = len(parents)
        tokens.append(kids)
        parents.extend(owner)
        frontier = list(range(first, len(parents)))
        levels += 1
        if last or depth == len(widths) - 1:
            break
        logits, hidden = _feed_level(draft, caches.draft_cache, kids, parents, len(parents) == levels, base, first,
                                     masks, want_hidden)
        if not greedy:
            probs = warp.probs(logits)
            fed_q.append(probs)
        if stop is not None and stop(depth + 1, hidden, logits, **_alive_rows(stop, alive)):
            last = bool(getattr(stop, "draws_one_more", False))  # draw the next level, then end unfed
            stopped = not last
            if stopped:
                break
    node_q = torch.cat(fed_q) if fed_q else None
    num_fed = len(parents) if stopped else len(parents) - len(frontier)
    return DraftTree(torch.cat(tokens), parents, root_q, node_q, num_fed, depth=levels, n_roots=n,
                     valid=_valid(valid, tokens))


def _alive_rows(stop: DraftStop, alive: torch.Tensor | None) -> dict:
    """The stop hook's ``alive`` argument where the level has dead rows and the hook reads it (``reads_alive``)."""
    return {"alive": alive} if alive is not None and getattr(stop, "reads_alive", False) else {}


def _roots_only(roots: torch.Tensor | None, device) -> DraftTree:
    """A round the draft does not run in (no widths): no tree, or the caller's roots alone."""
    if roots is None:
        return DraftTree.empty(device)
    return DraftTree(roots.reshape(-1), [-1] * roots.numel(), None, None, 0, depth=1, n_roots=roots.numel())


def _valid(valid: list[torch.Tensor | None], tokens: list[torch.Tensor]) -> torch.Tensor | None:
    """Every node's validity (None: all valid) from the levels'."""
    if all(v is None for v in valid):
        return None
    return torch.cat([torch.ones_like(t, dtype=torch.bool) if v is None else v for v, t in zip(valid, tokens)])


def _draw_level(probs, logits, frontier: list[int], k: int, warp: Warp, replacement: bool, generator,
                defer: bool = False, alive: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, list[int], torch.Tensor | None]:
    """The next level: k children of every frontier node (:func:`draw_children`; the valid ones), flattened,
    each child's parent, and (``defer``: every child kept) which children are valid (None: all). ``alive`` (F,)
    bool: which frontier nodes are real (a dead one's children are not)."""
    kids, valid = draw_children(probs, logits, k, warp, replacement, generator)
    k = kids.size(-1)
    if alive is not None:
        valid = alive[:, None] if valid is None else valid & alive[:, None]
        valid = valid.expand(kids.shape)
    if valid is None or defer:  # the parents are known on the host, nothing is read from the device
        return kids.reshape(-1), [f for f in frontier for _ in range(k)], None if valid is None else valid.reshape(-1)
    counts = valid.sum(-1).tolist()  # the level's one read: each row's valid children, a prefix of it (top-k order)
    if min(counts) == k:  # the usual case: the parents known on the host
        return kids.reshape(-1), [f for f in frontier for _ in range(k)], None
    if len(counts) == 1:  # one short row (a fork's heads): a slice
        return kids[0, :counts[0]], [frontier[0]] * counts[0], None
    keep = torch.argsort(~valid.reshape(-1), stable=True)[:sum(counts)]  # the valid ones in order, on the device
    return kids.reshape(-1).index_select(0, keep), [f for f, n in zip(frontier, counts) for _ in range(n)], None


def _feed_level(draft, cache, kids: torch.Tensor, parents: list[int], chain: bool, base: int, first: int,
                masks: SlicedTreeMask | None, want_hidden: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One draft forward of a level's nodes (``first`` …) with tree attention over the cached tree (plain causal
    while the tree is a ``chain``); the level's logits and (``want_hidden``) last hidden states."""
    if chain:  # causal attention is the tree mask of a chain
        out = draft(kids[None], cache, return_hidden=want_hidden)
    else:
        dtype = next(draft.model.parameters()).dtype
        mask, pos = attention_inputs(parents, base, first_node=first, sliced=masks, dtype=dtype, device=kids.device)
        out = draft(kids[None], cache, position_ids=pos, attention_mask=mask, return_hidden=want_hidden)
    return (out[0][0], out[1][0]) if want_hidden else (out[0], None)


def _first_forward(draft, caches: SpeculativeCaches, roots: torch.Tensor | None,
                   masks: SlicedTreeMask | None) -> tuple[torch.Tensor, int]:
    """The round's first draft forward: the pending tokens (→ the root distribution, (1, V)), or with
    target-sampled ``roots`` the pending tokens and the roots (→ the roots' next-token logits, (n, V); not the
    stem's: the LM head is costly at large vocabularies). Returns the logits and the cache length the drafted
    tree's nodes follow."""
    cache = caches.draft_cache
    if roots is None:
        logits = draft(caches.draft_pending, cache, all_logits=False)[0, -1:]
        return logits, cache_length(cache)  # committed prefix incl. pending; tree nodes follow
    stem = caches.draft_pending
    s, prefix, n = stem.size(1), cache_length(cache), roots.numel()
    ids = torch.cat([stem, roots[None]], dim=1)
    if n == 1:
        return draft(ids, cache, keep=n)[0], prefix + s
    dtype = next(draft.model.parameters()).dtype
    mask, pos = attention_inputs([-1] * n, prefix, stem_len=s, sliced=masks, dtype=dtype, device=stem.device)
    return draft(ids, cache, position_ids=pos, attention_mask=mask, keep=n)[0], prefix + s


@dataclass
class Proposal:
    """A round's draft as the target verifies it: ``dtree``, the draft's tree (drafting order, the distributions),
    and ``tree``, the token tree the target scores — the draft's own tree, node for node (target node u is draft
    node u). ``candidates[u]`` (u = −1: the roots) lists u's children in draw order. ``merge``: duplicates merged
    on the device (:func:`merge_duplicates`), which the walk reads instead of ``candidates``."""

    dtree: DraftTree
    tree: TokenTree
    _candidates: dict[int, list[int]] | None = None
    merge: DeviceMerge | None = None

    @classmethod
    def of(cls, dtree: DraftTree) -> Proposal:
        """The draft tree verified as drafted (a chain; a level-ordered tree whose masks are sliced)."""
        return cls(dtree, TokenTree(dtree.tokens, dtree.parents))

    @property
    def candidates(self) -> dict[int, list[int]]:
        """Each target node's children in draw order (key −1: the roots)."""
        if self._candidates is None:
            self._candidates = children_lists(self.tree.parents)
        return self._candidates


def merge_duplicates(dtree: DraftTree, distinct: bool = False) -> Proposal:
    """SpecInfer's token-tree merge — draft nodes with the same parent and token are one node, each draw a candidate
    of its own — and the drop of children a short row could not give (``DraftTree.valid``), both on the device at
    the drafted tree's fixed shape (:mod:`~harness.primitives.tree_merge`: no read, a repeated shape's mask).
    ``distinct``: siblings are distinct draws (greedy top-k, draws without replacement), so nothing merges and
    only the invalid are dropped. A tree with neither is verified as drafted (:meth:`Proposal.of`)."""
    if dtree.valid is None and (distinct or len(set(dtree.parents)) == len(dtree.parents)):
        return Proposal.of(dtree)
    return Proposal(dtree, TokenTree(dtree.tokens, dtree.parents), merge=merge_on_device(dtree, distinct))
