"""Drafting token trees with the draft model's KV cache, and merging duplicate draws.

* :func:`draft_tree` — the draft model proposes a token tree level by level (one draft forward
  per level, tree attention inside the level); a chain (vanilla SD), m i.i.d. sequences
  (SpecInfer/Spectr: widths (m, 1, …, 1)) and a per-depth k-config (MCSD: e.g. (4, 2, 2, 1)) are
  all width lists;
* :func:`draw_children` — the children of every frontier node: greedy top-k, i.i.d. draws, or
  draws without replacement (Gumbel-top-k);
* :func:`merge_duplicates` — identical sibling prefixes share one node for the target
  (SpecInfer's token-tree merge), each draw staying a candidate of its own.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.primitives.kv_cache import cache_length
from harness.primitives.sampling import sample
from harness.primitives.spec_state import DraftTree, SpeculativeCaches
from harness.primitives.tree import TokenTree, tree_attention_mask, tree_position_ids
from harness.primitives.warping import Warp


def draw_children(probs: torch.Tensor, logits: torch.Tensor, k: int, warp: Warp, replacement: bool,
                  generator) -> tuple[torch.Tensor, torch.Tensor | None]:
    """k children for each of F frontier nodes: (F, k) tokens and a (F, k) validity mask (None: all valid).

    Greedy: the k most likely draft tokens. With replacement: k i.i.d. draws from T∘q.
    Without: Gumbel-top-k, i.e. sequential draws without replacement in draw order; a row
    with fewer than k tokens in its support gets fewer valid children.
    """
    k = min(k, logits.size(-1))
    if warp.is_greedy:
        return torch.topk(logits, k, dim=-1).indices, None
    if replacement or k == 1:
        return sample(probs, generator, k), None
    u = torch.rand(probs.shape, generator=generator, device=probs.device).clamp_min(1e-30)
    keys = torch.log(probs) - torch.log(-torch.log(u))
    top = torch.topk(keys, k, dim=-1)
    return top.indices, top.values > float("-inf")


def draft_tree(draft, caches: SpeculativeCaches, widths: list[int], warp: Warp, generator,
               replacement: bool = True) -> DraftTree:
    """Draft ``len(widths)`` levels: every node at depth d gets ``widths[d]`` children.

    Uses exactly ``len(widths)`` draft forwards: the pending tokens first (→ root
    distribution), then each level but the last, all of a level's nodes in one forward
    with tree attention over the draft KV cache (plain causal while the tree is a chain).
    The draft cache grows by the pending tokens and every non-last-level node; the caller
    rolls it back with :func:`~harness.primitives.spec_state.commit_draft`. No widths (γ = 0):
    no draft forward, an empty tree.
    """
    if not widths:
        return DraftTree.empty(caches.draft_pending.device)
    cache = caches.draft_cache
    logits = draft(caches.draft_pending, cache, all_logits=False)[0, -1:]
    base = cache_length(cache)  # committed prefix incl. pending; tree nodes follow
    greedy = warp.is_greedy
    probs = None if greedy else warp.probs(logits)
    root_q = None if greedy else probs[0]
    tokens: list[torch.Tensor] = []
    parents: list[int] = []
    fed_q: list[torch.Tensor] = []
    frontier = [-1]
    dtype = next(draft.model.parameters()).dtype
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
        if depth == len(widths) - 1:
            break
        if len(parents) == depth + 1:  # still a chain: causal attention is the tree mask
            logits = draft(kids[None], cache)[0]
        else:
            mask = tree_attention_mask(parents, base, dtype, kids.device)[:, :, first:]
            pos = tree_position_ids(parents, base, kids.device)[:, first:]
            logits = draft(kids[None], cache, position_ids=pos, attention_mask=mask)[0]
        if not greedy:
            probs = warp.probs(logits)
            fed_q.append(probs)
    node_q = torch.cat(fed_q) if fed_q else None
    num_fed = len(parents) - len(frontier)
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
