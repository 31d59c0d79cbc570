"""Drafting token trees with the draft model's KV cache, and merging duplicate draws.

* :func:`draft_tree` — the draft model proposes a token tree level by level (one draft forward
  per level, tree attention inside the level); a chain (vanilla SD), m i.i.d. sequences
  (SpecInfer/Spectr: widths (m, 1, …, 1)) and a per-depth k-config (MCSD: e.g. (4, 2, 2, 1)) are
  all width lists; optionally below roots the caller gives (target-initialised trees), with masks
  sliced from one :class:`~harness.primitives.tree.SlicedTreeMask` and a per-turn stop hook
  (:class:`DraftStop`) (seed 003 §3.1-3.3);
* :func:`draw_children` — the children of every frontier node: greedy top-k, i.i.d. draws, or
  draws without replacement (Gumbel-top-k);
* :func:`merge_duplicates` — identical sibling prefixes share one node for the target
  (SpecInfer's token-tree merge), each draw staying a candidate of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from harness.primitives.kv_cache import cache_length
from harness.primitives.sampling import sample
from harness.primitives.spec_state import DraftTree, SpeculativeCaches
from harness.primitives.tree import SlicedTreeMask, TokenTree, attention_inputs
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
    """A per-turn stop hook of dynamic drafting (seed 003 §3.2-3.3, Fig. 2).

    Called after draft turn ``depth``'s forward (1 ≤ depth < the round's depth) with that level's rows:
    ``hidden`` (F, H) the draft's last hidden states at the level's tokens (None unless
    ``needs_hidden``) and ``logits`` (F, V) the draft's logits there (the next tokens' distribution).
    True ends the round's drafting at ``depth``. It must decide from these alone — never from tokens
    not yet drawn — so that the tree's shape is a stopping time and verification stays exact.
    """

    needs_hidden: bool

    def __call__(self, depth: int, hidden: torch.Tensor | None, logits: torch.Tensor) -> bool: ...


def draft_tree(draft, caches: SpeculativeCaches, widths: list[int], warp: Warp, generator,
               replacement: bool = True, *, roots: torch.Tensor | None = None, masks: SlicedTreeMask | None = None,
               stop: DraftStop | None = None) -> DraftTree:
    """Draft ``len(widths)`` levels: every node at depth d gets ``widths[d]`` children.

    Uses exactly ``len(widths)`` draft forwards: the pending tokens first (→ root
    distribution), then each level but the last, all of a level's nodes in one forward
    with tree attention over the draft KV cache (plain causal while the tree is a chain).
    The draft cache grows by the pending tokens and every non-last-level node; the caller
    rolls it back with :func:`~harness.primitives.spec_state.commit_draft`. No widths (γ = 0):
    no draft forward, an empty tree.

    Options (seed 003; nodes are kept in level order, so node i's q is ``node_q[i]``):

    * ``roots`` (n,): first-level tokens given by the caller (target-initialised trees, §3.1).
      They are the tree's first level (parents −1, no ``root_q``) and go into the first draft
      forward with the pending tokens; ``widths`` are the draft's levels below them. With no
      widths the draft does not run (the roots then become its pending tokens at commit).
    * ``masks``: a :class:`~harness.primitives.tree.SlicedTreeMask` of the largest tree in level
      order (roots level included); each level's mask is sliced from it when the tree drafted so far
      is its truncation (§3.2), and built otherwise.
    * ``stop``: a :class:`DraftStop` asked after each draft level's forward but the last; when it
      says stop, the tree ends at that level (then every node was fed: ``num_fed`` = all).
    """
    device = caches.draft_pending.device
    if not widths:
        if roots is None:
            return DraftTree.empty(device)
        return DraftTree(roots.reshape(-1), [-1] * roots.numel(), None, None, 0)
    cache = caches.draft_cache
    greedy = warp.is_greedy
    dtype = next(draft.model.parameters()).dtype
    want_hidden = stop is not None and stop.needs_hidden
    tokens: list[torch.Tensor] = []
    parents: list[int] = []
    fed_q: list[torch.Tensor] = []
    if roots is None:
        logits = draft(caches.draft_pending, cache, all_logits=False)[0, -1:]
        base = cache_length(cache)  # committed prefix incl. pending; tree nodes follow
        frontier = [-1]
        levels = 0
    else:
        roots = roots.reshape(-1).to(device)
        stem = caches.draft_pending
        s, prefix = stem.size(1), cache_length(cache)
        tokens.append(roots)
        parents.extend([-1] * roots.numel())
        frontier = list(range(roots.numel()))
        levels = 1
        ids = torch.cat([stem, roots[None]], dim=1)
        n = roots.numel()  # logits of the roots only (not of the stem: the LM head is costly at large vocabularies)
        if n == 1:
            logits = draft(ids, cache, keep=n)[0]
        else:
            mask, pos = attention_inputs(parents, prefix, stem_len=s, sliced=masks, dtype=dtype, device=device)
            logits = draft(ids, cache, position_ids=pos, attention_mask=mask, keep=n)[0]
        base = prefix + s
    probs = None if greedy else warp.probs(logits)
    root_q = None if greedy or roots is not None else probs[0]
    if roots is not None and not greedy:
        fed_q.append(probs)
    stopped = False
    for depth, k in enumerate(widths):
        kids, valid = draw_children(probs, logits, k, warp, replacement, generator)
        owner = torch.tensor(frontier, device=kids.device)[:, None].expand_as(kids)
        if valid is not None and not bool(valid.all()):
            kids, owner = kids[valid], owner[valid]
        kids, owner = kids.reshape(-1), owner.reshape(-1).tolist()
        first = len(parents)
        tokens.append(kids)
        parents.extend(owner)
        frontier = list(range(first, len(parents)))
        levels += 1
        if depth == len(widths) - 1:
            break
        if len(parents) == levels:  # still a chain: causal attention is the tree mask
            out = draft(kids[None], cache, return_hidden=want_hidden)
        else:
            mask, pos = attention_inputs(parents, base, first_node=first, sliced=masks, dtype=dtype, device=kids.device)
            out = draft(kids[None], cache, position_ids=pos, attention_mask=mask, return_hidden=want_hidden)
        logits, hidden = (out[0][0], out[1][0]) if want_hidden else (out[0], None)
        if not greedy:
            probs = warp.probs(logits)
            fed_q.append(probs)
        if stop is not None and stop(depth + 1, hidden, logits):
            stopped = True
            break
    node_q = torch.cat(fed_q) if fed_q else None
    num_fed = len(parents) if stopped else len(parents) - len(frontier)
    return DraftTree(torch.cat(tokens), parents, root_q, node_q, num_fed)


@dataclass
class MergedTree:
    """The draft tree with identical sibling prefixes merged, as the target sees it.

    ``tree`` is depth-first; ``draft_node[u]`` a draft node that merged node u stands for;
    ``candidates[u]`` (u = −1: the roots) lists u's children in draw order, repeated once
    per draft sample (duplicates are i.i.d. draws that happened to coincide).
    """

    tree: TokenTree
    draft_node: list[int]
    candidates: dict[int, list[int]] = field(default_factory=dict)


def merge_duplicates(dtree: DraftTree) -> MergedTree:
    """Merge draft nodes with the same parent and token (SpecInfer's token-tree merge)."""
    key_to_id: dict[tuple[int, int], int] = {}
    merged_of: list[int] = []
    m_tokens: list[int] = []
    m_parents: list[int] = []
    rep: list[int] = []
    for i, (tok, par) in enumerate(zip(dtree.tokens.tolist(), dtree.parents)):
        key = (merged_of[par] if par >= 0 else -1, tok)
        if key not in key_to_id:
            key_to_id[key] = len(m_tokens)
            m_tokens.append(tok)
            m_parents.append(key[0])
            rep.append(i)
        merged_of.append(key_to_id[key])
    tree, new_index = TokenTree.depth_first(torch.tensor(m_tokens, dtype=torch.long, device=dtree.tokens.device),
                                            m_parents)
    new_index = new_index.tolist()
    draft_node = [0] * len(rep)
    for old, d in enumerate(rep):
        draft_node[new_index[old]] = d
    candidates: dict[int, list[int]] = {}
    for i, par in enumerate(dtree.parents):
        owner = new_index[merged_of[par]] if par >= 0 else -1
        candidates.setdefault(owner, []).append(new_index[merged_of[i]])
    return MergedTree(tree, draft_node, candidates)
