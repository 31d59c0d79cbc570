"""Lossless speculative sampling, written once for SD, SpecInfer, Spectr and MCSD.

Pieces, in the order an iteration uses them:

* :class:`SpeculativeCaches` — both models' KV caches plus the committed tokens each has
  not seen yet, so that no prefix is ever recomputed;
* :func:`draft_tree` — the draft model proposes a token tree level by level with its KV
  cache (one draft forward per level, tree attention inside the level); a chain
  (vanilla SD), m i.i.d. sequences (SpecInfer/Spectr: widths (m, 1, …, 1)) and a
  per-depth k-config (MCSD: e.g. (4, 2, 2, 1)) are all width lists;
* :func:`merge_duplicates` — identical sibling prefixes share one node for the target;
* :func:`~harness.primitives.tree.tree_forward` — ONE target forward over the tree;
* per-node selection rules: :func:`accept_chain` (Leviathan et al. 2023 Alg. 1, seed 000
  §2.2 steps 1–3), :func:`multi_step_select` (SpecInfer's multi-step speculative sampling;
  MCSD Alg. 2 when candidates were drawn without replacement), :func:`k_sequential_select`
  (Spectr's K-SEQ), and greedy matching;
* :func:`commit_path` rollback of both caches to the accepted path.

Warping: every rule compares warped distributions p̃ = T∘p and q̃ = T∘q (seed 000 §2.2).
``temperature == 0`` is greedy: drafts are the draft's argmax (top-k for several children),
a draft token is accepted iff it is the target's argmax, so the output is the target's
greedy output whatever the draft.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from harness.primitives.kv_cache import cache_length, new_cache
from harness.primitives.sampling import residual, sample
from harness.primitives.tree import TokenTree, commit_path, tree_attention_mask, tree_forward, tree_position_ids
from harness.primitives.warping import Warp

SELECTION_RULES = ("multi_step", "k_sequential")


class SpeculativeCaches:
    """KV caches of target and draft, and the committed tokens each cache still lacks (``*_pending``).

    Invariant: cache + pending = the committed sequence. The caches start empty with the
    whole prompt pending, so the prompt is prefilled inside the first iteration's draft and
    target forwards (as HF assisted generation does): one target call per iteration, none extra.
    """

    def __init__(self, target, draft, prompt_ids: torch.Tensor):
        if prompt_ids.numel() == 0:
            raise ValueError("speculative decoding needs a prompt of at least one token")
        self.target_cache = new_cache(target.model)
        self.draft_cache = new_cache(draft.model)
        self.target_pending = prompt_ids
        self.draft_pending = prompt_ids


@dataclass
class DraftTree:
    """Draft tokens in breadth-first (drafting) order with the distributions they were drawn from.

    ``parents[i]`` indexes an earlier node (−1: child of the committed sequence).
    ``root_q`` (V,) is T∘q at the committed sequence; ``node_q[i]`` (V,) is T∘q after node i,
    for the ``num_fed`` nodes the draft model has processed (all but the last level). Both
    are None when greedy.
    """

    tokens: torch.Tensor
    parents: list[int]
    root_q: torch.Tensor | None
    node_q: torch.Tensor | None
    num_fed: int

    def q_after(self, node: int) -> torch.Tensor:
        return self.root_q if node < 0 else self.node_q[node]


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
    rolls it back with :func:`commit_draft`.
    """
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
    tree, new_index = TokenTree.depth_first(torch.tensor(m_tokens, device=dtree.tokens.device), m_parents)
    new_index = new_index.tolist()
    draft_node = [0] * len(rep)
    for old, d in enumerate(rep):
        draft_node[new_index[old]] = d
    candidates: dict[int, list[int]] = {}
    for i, par in enumerate(dtree.parents):
        owner = new_index[merged_of[par]] if par >= 0 else -1
        candidates.setdefault(owner, []).append(new_index[merged_of[i]])
    return MergedTree(tree, draft_node, candidates)


def accept_chain(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, generator) -> tuple[int, int]:
    """Speculative sampling of a chain (Leviathan et al. 2023 Alg. 1; seed 000 §2.2 step 3).

    ``p`` (γ+1, V) warped target distributions, ``q`` (γ, V) warped draft distributions,
    ``tokens`` (γ,) drafts. Accept x_t with probability min(1, p̃(x_t)/q̃(x_t)) up to the
    first rejection, then draw from norm(max(0, p̃ − q̃)); if all are accepted draw the
    bonus token from p̃_{γ+1}. Returns (number accepted, next token).
    """
    gamma = tokens.numel()
    idx = torch.arange(gamma, device=p.device)
    u = torch.rand(gamma, generator=generator, device=p.device)
    ok = u * q[idx, tokens] < p[idx, tokens]  # u < p/q without dividing (q(x_t) > 0)
    n = int(ok.long().cumprod(0).sum())
    dist = residual(p[n], q[n]) if n < gamma else p[gamma]
    return n, int(sample(dist, generator)[0])


def accept_chain_greedy(target_logits: torch.Tensor, tokens: torch.Tensor) -> tuple[int, int]:
    """Greedy chain verification: accept drafts while they equal the target's argmax."""
    best = target_logits.argmax(-1)
    gamma = tokens.numel()
    n = int((best[:gamma] == tokens).long().cumprod(0).sum())
    return n, int(best[n])


def multi_step_select(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, generator,
                      replacement: bool = True) -> tuple[int | None, torch.Tensor]:
    """Multi-step speculative sampling over k candidates of one node (SpecInfer, Miao et al. 2024).

    Candidate i is accepted with probability min(1, p_i(x_i)/q_i(x_i)); on rejection
    p_{i+1} = norm(max(0, p_i − q_i)). With replacement q_i = q (candidates i.i.d. from q);
    without replacement (MCSD, Yang et al. 2024, Alg. 2) q_{i+1} is q_i with x_i removed and
    renormalised. Returns (index of the accepted candidate or None, distribution to draw the
    correction from when none is accepted). Exact for any k by induction on the candidates.
    """
    toks = tokens.tolist()
    u = torch.rand(len(toks), generator=generator, device=p.device).tolist()
    for i, x in enumerate(toks):
        px, qx = float(p[x]), float(q[x])
        if u[i] * qx < px:
            return i, p
        p = residual(p, q)
        if not replacement:
            q = q.clone()
            q[x] = 0.0
            total = q.sum()
            if total <= 0:
                break
            q = q / total
    return None, p


def k_sequential_rho(p: torch.Tensor, q: torch.Tensor, k: int, grid: int = 24) -> float:
    """Spectr's ρ*: the smallest ρ ∈ [1, k] with 1 − (1 − β(ρ))^k ≤ ρ β(ρ), β(ρ) = Σ min(q, p/ρ).

    Both sides are monotone in ρ and ρ = k always qualifies, so two vectorised grid passes
    bracket ρ* from above (a slightly larger ρ stays exact, it only accepts a bit less).
    """
    lo, hi = 1.0, float(k)
    for _ in range(2):
        rhos = torch.linspace(lo, hi, grid, device=p.device, dtype=p.dtype)
        beta = torch.minimum(q[None], p[None] / rhos[:, None]).sum(-1)
        feasible = 1 - (1 - beta).pow(k) <= rhos * beta + 1e-7
        first = int(torch.nonzero(feasible)[0, 0]) if bool(feasible.any()) else grid - 1
        lo, hi = float(rhos[max(first - 1, 0)]), float(rhos[first])
        if first == 0:
            break
    return hi


def k_sequential_select(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor,
                        generator) -> tuple[int | None, torch.Tensor]:
    """Spectr's K-SEQ selection (Sun et al. 2023, Alg. 3) over k i.i.d. candidates from q.

    Candidate i is accepted with probability min(1, p(x_i)/(ρ q(x_i))); if none is,
    draw from p_res ∝ p − min(q, p/ρ)·(1 − (1 − β)^k)/β, which makes the output exactly p.
    Returns (index or None, p_res).
    """
    k = tokens.numel()
    rho = k_sequential_rho(p, q, k) if k > 1 else 1.0
    u = torch.rand(k, generator=generator, device=p.device)
    ok = u * rho * q[tokens] < p[tokens]
    if bool(ok.any()):
        return int(torch.nonzero(ok)[0, 0]), p
    m = torch.minimum(q, p / rho)
    beta = m.sum()
    scale = (1 - (1 - beta) ** k) / beta if beta > 0 else torch.tensor(float(k))
    return None, residual(p, m * scale)


@dataclass
class StepResult:
    """One speculative iteration: committed tokens (accepted drafts + one target token)."""

    tokens: list[int]
    drafted: int
    accepted: int


def commit_draft(caches: SpeculativeCaches, draft_prefix: int, dtree: DraftTree, draft_path: list[int],
                 new_token: int, device) -> None:
    """Roll the draft cache back to the accepted path; unprocessed path tokens become pending."""
    in_cache = [n for n in draft_path if n < dtree.num_fed]
    commit_path(caches.draft_cache, draft_prefix, [draft_prefix + n for n in in_cache])
    missing = dtree.tokens[draft_path[len(in_cache):]].tolist()
    caches.draft_pending = torch.tensor([missing + [new_token]], dtype=torch.long, device=device)


def chain_step(target, draft, caches: SpeculativeCaches, gamma: int, warp: Warp, generator) -> StepResult:
    """One vanilla speculative-decoding iteration: γ draft forwards, ONE target forward.

    The target forward and the rollback of both caches are :func:`~harness.primitives.chain_verify.verify_chain`
    (shared with the chain methods whose acceptance rule is not speculative sampling).
    """
    from harness.primitives.chain_verify import verify_chain  # it builds on this module

    device = caches.target_pending.device
    draft_prefix = cache_length(caches.draft_cache) + caches.draft_pending.size(1)
    dtree = draft_tree(draft, caches, [1] * gamma, warp, generator)
    if warp.is_greedy:
        rule = accept_chain_greedy
    else:
        q = torch.cat([dtree.root_q[None], dtree.node_q]) if dtree.node_q is not None else dtree.root_q[None]

        def rule(logits, tokens):
            return accept_chain(warp.probs(logits), q, tokens, generator)

    return verify_chain(target, caches, dtree, draft_prefix, rule, device)


def tree_step(target, draft, caches: SpeculativeCaches, widths: list[int], warp: Warp, generator, rule: str,
              replacement: bool = True) -> StepResult:
    """One token-tree iteration: draft the tree, ONE target forward, walk down accepting, roll back.

    At each node the candidates (its children, in draw order) go through ``rule``
    ("multi_step" or "k_sequential"); the walk moves to the accepted child, or stops with
    a token drawn from the rule's correction distribution; at a leaf the bonus token is
    drawn from the target's distribution there. Greedy: the child equal to the target's
    argmax is accepted.
    """
    if rule not in SELECTION_RULES:
        raise ValueError(f"unknown selection rule {rule!r}; valid: {SELECTION_RULES}")
    device = caches.target_pending.device
    draft_prefix = cache_length(caches.draft_cache) + caches.draft_pending.size(1)
    dtree = draft_tree(draft, caches, widths, warp, generator, replacement)
    merged = merge_duplicates(dtree)
    tree = merged.tree
    target_prefix = cache_length(caches.target_cache) + caches.target_pending.size(1)
    stem_logits, node_logits = tree_forward(target, caches.target_cache, caches.target_pending, tree)
    path: list[int] = []
    node = -1
    while True:
        logits = stem_logits[-1] if node < 0 else node_logits[node]
        cands = merged.candidates.get(node)
        if warp.is_greedy:
            best = int(logits.argmax())
            hit = [c for c in (cands or []) if int(tree.tokens[c]) == best]
            if not hit:
                new_token = best
                break
            node = hit[0]
        else:
            p = warp.probs(logits)
            if not cands:
                new_token = int(sample(p, generator)[0])
                break
            q = dtree.q_after(merged.draft_node[node] if node >= 0 else -1)
            cand_tokens = tree.tokens[cands]
            if rule == "k_sequential":
                idx, dist = k_sequential_select(p, q, cand_tokens, generator)
            else:
                idx, dist = multi_step_select(p, q, cand_tokens, generator, replacement)
            if idx is None:
                new_token = int(sample(dist, generator)[0])
                break
            node = cands[idx]
        path.append(node)
    commit_path(caches.target_cache, target_prefix, [target_prefix + n for n in path])
    caches.target_pending = torch.tensor([[new_token]], device=device)
    commit_draft(caches, draft_prefix, dtree, [merged.draft_node[n] for n in path], new_token, device)
    return StepResult(tree.tokens[path].tolist() + [new_token], drafted=len(dtree.parents), accepted=len(path))


def speculative_loop(step, gamma: int, max_new_tokens: int, eos_token_id: int | None, stats) -> list[int]:
    """Run ``step(depth) -> StepResult`` until ``max_new_tokens`` or EOS; fill speculative stats.

    The draft depth is min(γ, tokens still needed − 1), at least 1 (a shorter draft is as
    exact as a full one and saves work at the end). ``accept_lengths`` are tokens committed
    per iteration (accepted + 1), as Spec-Bench records them. ``extra["rejected_rounds"]``
    counts rounds that stopped before the draft's end, so that accepted ÷ (accepted +
    rejected_rounds) estimates the per-token acceptance probability α of a chain.
    """
    out: list[int] = []
    stats.extra.setdefault("rejected_rounds", 0)
    while len(out) < max_new_tokens:
        depth = max(1, min(gamma, max_new_tokens - len(out) - 1))
        res = step(depth)
        stats.iterations += 1
        stats.drafted_tokens += res.drafted
        stats.accepted_tokens += res.accepted
        stats.accept_lengths.append(res.accepted + 1)
        stats.extra["rejected_rounds"] += int(res.accepted < depth)
        out.extend(res.tokens)
        if eos_token_id is not None and eos_token_id in res.tokens:
            out = out[: out.index(eos_token_id) + 1]
            break
    return out[:max_new_tokens]
