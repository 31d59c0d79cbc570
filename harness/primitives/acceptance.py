"""Acceptance rules of speculative decoding, every one in this module: pure functions of distributions, drafts
and a generator.

Two families, each with ONE signature:

* chain rules — :data:`ChainRule` ``(logits (n+1, V), drafts (n,), dtree, warp, generator) -> (kept,
  distribution of the next token)``: how many drafts of a chain to keep and what the token after them
  is drawn from (its argmax when greedy; the round draws it, :func:`~harness.primitives.spec_loop.draw`).
  ``kept`` is an int, or a 0-d long tensor on the device: the lossless rules keep the count and the next
  distribution there (no host read; :class:`~harness.primitives.spec_loop.ChainAcceptance` reads the round's
  outcome once, issue 28 item 2).
  ``logits`` are the target's raw logits after 0..n drafts, ``dtree`` the
  :class:`~harness.primitives.spec_state.DraftTree` (its draft distributions). Lossless:
  :func:`speculative_sampling` (Leviathan et al. 2023 Alg. 1, dsbd §2.2) and :func:`greedy_chain`;
  :func:`point_mass_chain` (deterministic drafts: a lookup); lossy baselines: :func:`mtad_rule` (mtad §3.2,
  Alg. 1), :func:`bild_rule` (BiLD's rollback) and :func:`typical_rule` (Medusa's typical acceptance; on a tree
  :func:`typical_select` with :func:`typical_tree_keys`).
* selection rules — :data:`SelectionRule` ``(p (V,), q (V,) | None, candidates (k,), generator) ->
  (index of the accepted candidate or None, distribution of the correction token)``: one node of a
  token tree. :func:`multi_step_select` (SpecInfer), :func:`multi_step_select_without_replacement`
  (MCSD Alg. 2), :func:`k_sequential_select` (Spectr's K-SEQ), :func:`point_mass_select` (deterministic
  candidates: lookups, trained heads) and :func:`greedy_select`.

Under greedy decoding every speculative decoder accepts with :func:`greedy_chain` / :func:`greedy_select`
(the target's argmax), so its output is the target's greedy output. A new lossless tree method is one
selection rule here plus one decoder file (:mod:`harness.decoders.speculative`).
Warping: the lossless rules compare warped distributions p̃ = T∘p and q̃ = T∘q (dsbd §2.2).
"""
from __future__ import annotations

import math
from functools import partial
from typing import Callable

import torch

from harness.primitives.sampling import residual

ChainRule = Callable[..., tuple[int, torch.Tensor]]
SelectionRule = Callable[[torch.Tensor, "torch.Tensor | None", torch.Tensor, "torch.Generator | None"],
                         tuple["int | None", torch.Tensor]]
RowRule = Callable[..., tuple[torch.Tensor, "torch.Tensor | None"]]


def accept_chain(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, generator) -> tuple[int, int]:
    """Speculative sampling of a chain (Leviathan et al. 2023 Alg. 1; dsbd §2.2 step 3).

    ``p`` (γ+1, V) warped target distributions, ``q`` (γ, V) warped draft distributions,
    ``tokens`` (γ,) drafts. Accept x_t with probability min(1, p̃(x_t)/q̃(x_t)) up to the
    first rejection; the next token comes from norm(max(0, p̃ − q̃)) there, or (all accepted)
    it is the bonus token from p̃_{γ+1}. Returns (number accepted, the next token's distribution).
    """
    gamma = tokens.numel()
    idx = torch.arange(gamma, device=p.device)
    u = torch.rand(gamma, generator=generator, device=p.device)
    ok = u * q[idx, tokens] < p[idx, tokens]  # u < p/q without dividing (q(x_t) > 0)
    n = ok.long().cumprod(0).sum()  # 0-d, on the device: nothing read here
    q_n = _row(torch.cat([q, torch.zeros_like(q[:1])]), n)  # a zero row after the last draft
    dist = torch.where(n < gamma, residual(_row(p, n), q_n), p[gamma])
    return n, dist


def _row(x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """``x[n]`` for a 0-d device index, without reading it on the host (``index_select``)."""
    return x.index_select(0, n.reshape(1))[0]


def speculative_sampling(logits: torch.Tensor, tokens: torch.Tensor, dtree, warp, generator) -> tuple[int, torch.Tensor]:
    """:func:`accept_chain` as a chain rule: p̃ from the target's logits, q̃ from the drafted chain
    (no drafts: the target's own next-token distribution)."""
    if dtree.root_q is None:
        return 0, warp.probs(logits[0])
    q = torch.cat([dtree.root_q[None], dtree.node_q]) if dtree.node_q is not None else dtree.root_q[None]
    return accept_chain(warp.probs(logits), q, tokens, generator)


def greedy_chain(logits: torch.Tensor, tokens: torch.Tensor, dtree=None, warp=None,
                 generator=None) -> tuple[int, torch.Tensor]:
    """Greedy chain verification: accept drafts while they equal the target's argmax (the next token is
    the argmax after them: its logits are returned)."""
    best = logits.argmax(-1)
    gamma = tokens.numel()
    n = (best[:gamma] == tokens).long().cumprod(0).sum()  # 0-d, on the device
    return n, _row(logits, n)


def longest_accepted_prefix(p_joint_logp: torch.Tensor, q_joint_logp: torch.Tensor, tau: float) -> torch.Tensor:
    """η = max{j : min(1, p(x_{1:j}) / q(x_{1:j})) > τ}, 0 if no prefix passes (mtad Alg. 1 lines 6-13), as a 0-d
    long tensor on the device (no host read: the round reads its outcome once, issue 28 item 2).

    Inputs are joint log-likelihoods of the prefixes j = 1..γ; compared in log space.
    """
    log_ratio = torch.clamp(p_joint_logp - q_joint_logp, max=0.0)
    passes = log_ratio > (math.log(tau) if tau > 0 else float("-inf"))
    j = torch.arange(1, passes.numel() + 1, device=passes.device)
    return (passes.long() * j).max(0).values if passes.numel() else torch.zeros((), dtype=torch.long,
                                                                                  device=passes.device)


def mtad_rule(logits: torch.Tensor, tokens: torch.Tensor, dtree, warp, generator, *, tau: float) -> tuple[int, torch.Tensor]:
    """MTAD (mtad §3.2, Alg. 1 lines 4-16): keep the longest prefix x_{1:η} whose joint likelihood ratio
    min(1, p(x_{1:η}) / q(x_{1:η})) passes τ (raw, unwarped likelihoods, mtad §3.2 footnote 3; q from the
    draft's beam, ``dtree.joint_logq``); the next token comes from T∘p after it."""
    p_cond = torch.log_softmax(logits[:-1], -1).gather(1, tokens[:, None]).squeeze(1)
    eta = (longest_accepted_prefix(torch.cumsum(p_cond, 0), dtree.joint_logq, tau) if tokens.numel()
           else torch.zeros((), dtype=torch.long, device=logits.device))
    return eta, warp.probs(_row(logits, eta))


def first_rollback(target_nll: torch.Tensor, threshold: float) -> torch.Tensor:
    """Index of the first draft whose target NLL exceeds τ2, or the number of drafts if none does: a 0-d long
    tensor on the device (no host read)."""
    return (target_nll <= threshold).long().cumprod(0).sum()


def bild_rule(logits: torch.Tensor, tokens: torch.Tensor, dtree, warp, generator, *,
              threshold: float) -> tuple[int, torch.Tensor]:
    """BiLD's rollback policy (Kim et al. 2023): the first draft whose NLL −log T∘p(x_t | x_{<t}) exceeds τ2
    is replaced, with everything after it, by a token from T∘p there."""
    p = warp.probs(logits)
    nll = -torch.log(p[:-1].gather(1, tokens[:, None]).squeeze(1))
    kept = first_rollback(nll, threshold)
    return kept, _row(p, kept)


def typical_mask(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, epsilon: float,
                 delta: float) -> torch.Tensor:
    """(n,) bool: which drafts pass Medusa's entropy-adaptive test (argmax match when greedy) — the one definition.

    ``logits`` (n, V) are the target's where each draft is proposed, ``tokens`` (n,) the drafts. Draft x is
    typical iff p_τ(x | context) > min(ε, δ · exp(−H(p_τ(· | context)))), p_τ = softmax(logits / temperature).
    """
    if temperature == 0:
        return logits.argmax(-1) == tokens
    logp = torch.log_softmax(logits.float() / temperature, -1)
    entropy = -(logp.exp() * logp).nan_to_num().sum(-1)
    bar = torch.minimum(torch.full_like(entropy, epsilon), delta * torch.exp(-entropy))
    return logp.gather(1, tokens[:, None]).squeeze(1).exp() > bar


def typical_prefix_length(logits: torch.Tensor, tokens: torch.Tensor, temperature: float, epsilon: float,
                          delta: float) -> int:
    """Number of leading drafts of a chain that pass :func:`typical_mask` (``logits`` at the n draft positions)."""
    return int(_typical_count(logits, tokens, temperature, epsilon, delta))


def _typical_count(logits, tokens, temperature, epsilon, delta) -> torch.Tensor:
    """:func:`typical_prefix_length` as a 0-d device tensor (no host read)."""
    return typical_mask(logits, tokens, temperature, epsilon, delta).long().cumprod(0).sum()


def typical_tree_keys(parent_logits: torch.Tensor, tokens: torch.Tensor, ancestors: torch.Tensor, temperature: float,
                      epsilon: float, delta: float) -> torch.Tensor:
    """Medusa's typical acceptance on a token tree, on the device: the accepted path is the longest root-to-node
    path whose every node passes :func:`typical_mask` (ties: the first such end node in the tree's topological
    order — Medusa keeps the first candidate path of the longest accepted prefix). ``parent_logits[i]`` (V,): the
    target's logits where node i is proposed; ``ancestors`` (N, N) bool, node i's ancestors and itself
    (:func:`~harness.primitives.tree.tree_topology`). Returns (N,) long: per node u the key of the best such end in
    u's subtree, depth · (N + 1) + (N − i) for end i (longer first, then earlier), −1 where there is none. Going
    at each node to the child with the largest key (:func:`typical_rows`) ends at the best end: a walk."""
    n = tokens.numel()
    ok = typical_mask(parent_logits, tokens, temperature, epsilon, delta)
    all_ok = (ok[None, :] | ~ancestors).all(-1)  # every node of the root path to i is typical
    order = torch.arange(n, device=ok.device)
    key = torch.where(all_ok, ancestors.sum(-1) * (n + 1) + (n - order), -1)
    return torch.where(ancestors, key[:, None], -1).amax(0)  # column u: the ends below u (u among their ancestors)


def typical_rows(p, q, tokens, valid, generator, counts=None, *, keys) -> tuple[torch.Tensor, None]:
    """Medusa's typical acceptance at M nodes at once: each row's candidate with the largest key
    (:func:`typical_tree_keys`, ``keys`` (M, K) at the candidates), none where no key is ≥ 0. No correction (lossy
    by design): the token after the walk comes from p̃ where it stops, so ``p`` is not read (the walk passes
    None, :data:`NO_CORRECTION`)."""
    best = torch.where(valid, keys, -1).max(-1)
    return torch.where(best.values >= 0, best.indices, -1), None


def typical_select(p: torch.Tensor, q: torch.Tensor | None, tokens: torch.Tensor, generator, *,
                   keys: torch.Tensor | None = None) -> tuple[int | None, torch.Tensor]:
    """:func:`typical_rows` at one node (``keys`` (k,) at its candidates, required; ``q`` unused)."""
    if keys is None:
        raise ValueError("typical acceptance needs the keys of the tree's nodes (typical_tree_keys)")
    acc, _ = typical_rows(None, None, tokens.reshape(1, -1), torch.ones_like(tokens.reshape(1, -1), dtype=torch.bool),
                          generator, keys=keys.reshape(1, -1))
    i = int(acc[0])
    return (None if i < 0 else i), p


def typical_rule(logits: torch.Tensor, tokens: torch.Tensor, dtree, warp, generator, *, epsilon: float,
                 delta: float) -> tuple[int, torch.Tensor]:
    """Typical acceptance (Medusa, Cai et al. 2024): the longest all-typical prefix, then a token from T∘p."""
    kept = _typical_count(logits[:-1], tokens, warp.temperature, epsilon, delta)  # on the device
    return kept, warp.probs(_row(logits, kept))


def parameterised(rule: ChainRule, **params) -> ChainRule:
    """A chain rule with its method's parameters bound (e.g. ``parameterised(mtad_rule, tau=0.1)``)."""
    return partial(rule, **params)


def multi_step_rows(p: torch.Tensor, q: torch.Tensor | None, tokens: torch.Tensor, valid: torch.Tensor, generator,
                    replacement: bool = True, counts: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-step speculative sampling (SpecInfer, Miao et al. 2024) at M nodes at once, on the device.

    Row r: distributions ``p[r]``, ``q[r]`` (V,), candidates ``tokens[r]`` (K,) in draw order, ``valid[r]`` which
    of them exist (a row's candidates first, padding after). Candidate i is accepted with probability
    min(1, p_i(x_i)/q_i(x_i)); on rejection p_{i+1} = norm(max(0, p_i − q_i)). With replacement q_i = q (i.i.d.
    candidates); without (MCSD, Yang et al. 2024, Alg. 2) q_{i+1} is q_i with x_i removed and renormalised (a row
    whose q has no mass left stops). ``q`` None: deterministic candidates, q_i = δ_{x_i}
    (:func:`point_mass_select`). Returns (M,) long, the accepted candidate's index or −1, and (M, V) the
    correction distribution of the rows that accepted none. Exact for any K by induction on the candidates;
    every row draws its own uniforms, so rows are independent (a tree walk reads only the rows it visits).
    ``counts`` (host ints, non-increasing): each row's number of candidates, so that step i works on the rows
    that have an i-th candidate only (a prefix: no read)."""
    m, k = tokens.shape
    u = torch.rand((m, k), generator=generator, device=p.device)
    acc = torch.full((m,), -1, dtype=torch.long, device=p.device)
    live = torch.ones(m, dtype=torch.bool, device=p.device)
    p, q = p.clone(), (q.clone() if q is not None and not replacement else q)  # the prefix rows are updated in place
    for i in range(k):
        n = m if counts is None else sum(1 for c in counts if c > i)
        if n == 0:
            break
        x = tokens[:n, i:i + 1]
        pn, qn = p[:n], (q[:n] if q is not None else None)
        tries = valid[:n, i] & live[:n]
        qx = qn.gather(1, x)[:, 0] if qn is not None else 1.0
        ok = tries & (u[:n, i] * qx < pn.gather(1, x)[:, 0])
        acc[:n] = torch.where(ok, i, acc[:n])
        rejected = tries & ~ok
        live[:n] = live[:n] & ~ok
        if qn is None:  # p̃ without x: norm(max(0, p̃ − δ_x)); nothing left (rounding only): the row stops
            rest, alive = _without_rows(pn, x)
            p[:n] = torch.where((rejected & alive)[:, None], rest, pn)
            live[:n] = live[:n] & alive
            continue
        p[:n] = torch.where(rejected[:, None], residual(pn, qn), pn)
        if not replacement:
            rest, alive = _without_rows(qn, x)
            q[:n] = torch.where((rejected & alive)[:, None], rest, qn)
            live[:n] = live[:n] & (alive | ~rejected)
    return acc, p


def _without_rows(dist: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row of ``dist`` without its token ``x[r]``, renormalised, and whether any mass was left."""
    out = dist.scatter(1, x, 0.0)
    total = out.sum(-1, keepdim=True)
    return out / total.clamp_min(1e-30), total[:, 0] > 0


def _one_node(rows, p: torch.Tensor, q: torch.Tensor | None, tokens: torch.Tensor, generator,
              **kw) -> tuple[int | None, torch.Tensor]:
    """A row rule at one node: (index of the accepted candidate or None, correction distribution)."""
    tokens = tokens.reshape(1, -1)
    acc, dist = rows(p[None], None if q is None else q[None], tokens, torch.ones_like(tokens, dtype=torch.bool),
                     generator, **kw)
    i = int(acc[0])
    return (None if i < 0 else i), dist[0]


def multi_step_select(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, generator,
                      replacement: bool = True) -> tuple[int | None, torch.Tensor]:
    """:func:`multi_step_rows` at one node (SpecInfer's selection; ``replacement=False``: MCSD's)."""
    return _one_node(multi_step_rows, p, q, tokens, generator, replacement=replacement)


def multi_step_select_without_replacement(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor,
                                          generator) -> tuple[int | None, torch.Tensor]:
    """MCSD's selection (mcsd §2.2; Yang et al. 2024 Alg. 2): candidates drawn without replacement."""
    return multi_step_select(p, q, tokens, generator, replacement=False)


def k_sequential_rho(p: torch.Tensor, q: torch.Tensor, k: int, grid: int = 24) -> float:
    """Spectr's ρ* at one node (:func:`k_sequential_rho_rows`)."""
    return float(k_sequential_rho_rows(p[None], q[None], torch.tensor([float(k)], device=p.device), grid)[0])


def k_sequential_rho_rows(p: torch.Tensor, q: torch.Tensor, k: torch.Tensor, grid: int = 24) -> torch.Tensor:
    """Spectr's ρ* per row, on the device: the smallest ρ ∈ [1, k] with 1 − (1 − β(ρ))^k ≤ ρ β(ρ),
    β(ρ) = Σ min(q, p/ρ); ``k`` (M,) float.

    Both sides are monotone in ρ and ρ = k always qualifies, so two vectorised grid passes
    bracket ρ* from above (a slightly larger ρ stays exact, it only accepts a bit less).
    """
    lo, hi = torch.ones_like(k, dtype=p.dtype), k.to(p.dtype)
    steps = torch.linspace(0, 1, grid, device=p.device, dtype=p.dtype)
    for _ in range(2):
        rhos = torch.where(steps == 1, hi[:, None], lo[:, None] + (hi - lo)[:, None] * steps)  # (M, G)
        beta = torch.minimum(q[:, None], p[:, None] / rhos[..., None]).sum(-1)
        feasible = 1 - (1 - beta).pow(k[:, None]) <= rhos * beta + 1e-7
        first = torch.where(feasible.any(-1), feasible.to(torch.int8).argmax(-1), grid - 1)[:, None]
        lo, hi = rhos.gather(1, (first - 1).clamp_min(0))[:, 0], rhos.gather(1, first)[:, 0]
    return hi


def k_sequential_rows(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor,
                      generator, counts: list[int] | None = None,
                      max_multi: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Spectr's K-SEQ selection (Sun et al. 2023, Alg. 3) at M nodes at once (rows as :func:`multi_step_rows`),
    over each row's k i.i.d. candidates from q.

    Candidate i is accepted with probability min(1, p(x_i)/(ρ q(x_i))); if none is,
    draw from p_res ∝ p − min(q, p/ρ)·(1 − (1 − β)^k)/β, which makes the output exactly p.
    ``max_multi``: at most this many rows have more than one valid candidate (a bound the caller knows, e.g. the
    walk of a tree merged on the device); ρ*, the costly part, is then found for that many rows (the widest) only.
    """
    k = valid.sum(-1).to(p.dtype)
    multi = p.size(0) if counts is None else sum(1 for c in counts if c > 1)  # ``counts`` non-increasing: a prefix
    rho = torch.ones_like(k)
    if multi and max_multi is not None and max_multi < multi:  # the widest rows, by a fixed-size top-k (no read)
        pick = torch.topk(k[:multi], max(max_multi, 1)).indices
        kp = k.index_select(0, pick)
        rho = rho.scatter(0, pick, torch.where(kp > 1, k_sequential_rho_rows(p.index_select(0, pick),
                                                                             q.index_select(0, pick), kp.clamp_min(1)),
                                               1.0))
    elif multi:  # ρ* = 1 for a single candidate (plain speculative sampling)
        rho = torch.cat([torch.where(k[:multi] > 1, k_sequential_rho_rows(p[:multi], q[:multi], k[:multi].clamp_min(1)),
                                     1.0), rho[multi:]])
    u = torch.rand(tokens.shape, generator=generator, device=p.device)
    ok = valid & (u * rho[:, None] * q.gather(1, tokens) < p.gather(1, tokens))
    acc = torch.where(ok.any(-1), ok.to(torch.int8).argmax(-1), -1)
    m = torch.minimum(q, p / rho[:, None])
    beta = m.sum(-1, keepdim=True)
    scale = torch.where(beta > 0, (1 - (1 - beta) ** k[:, None]) / beta.clamp_min(1e-30), k[:, None])
    return acc, residual(p, m * scale)


def k_sequential_select(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor,
                        generator) -> tuple[int | None, torch.Tensor]:
    """:func:`k_sequential_rows` at one node (Spectr's K-SEQ)."""
    return _one_node(k_sequential_rows, p, q, tokens, generator)


def point_mass_select(p: torch.Tensor, q: torch.Tensor | None, tokens: torch.Tensor,
                      generator) -> tuple[int | None, torch.Tensor]:
    """Deterministic candidates (a lookup, a trained head's top tokens: their draft distribution is a point mass
    on each): candidate x is accepted with probability p̃(x); on rejection p̃ ← norm(max(0, p̃ − δ_x)), x
    removed. Multi-step speculative sampling with q_i = δ_{x_i} (:func:`multi_step_rows` with no q), so exact
    for any candidates (EAGLE's ``evaluate_posterior``). ``q`` is unused."""
    return _one_node(multi_step_rows, p, None, tokens, generator)


def point_mass_rows(p, q, tokens, valid, generator, counts=None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`point_mass_select` at M nodes at once (``q`` unused)."""
    return multi_step_rows(p, None, tokens, valid, generator, counts=counts)


def greedy_rows(p, q, tokens, valid, generator, counts=None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`greedy_select` at M nodes at once: each row's first valid candidate equal to p's argmax."""
    hit = valid & (tokens == p.argmax(-1, keepdim=True))
    return torch.where(hit.any(-1), hit.to(torch.int8).argmax(-1), -1), p


def point_mass_chain(logits: torch.Tensor, tokens: torch.Tensor, dtree=None, warp=None,
                     generator=None) -> tuple[int, torch.Tensor]:
    """A chain of deterministic drafts (a lookup) as a chain rule: :func:`point_mass_select` at each position,
    one candidate each, all positions at once on the device (draft x_t accepted with probability p̃(x_t); the first rejected one is replaced by a
    token from norm(p̃ − p̃(x_t)·δ_{x_t}), i.e. p̃ without x_t; all accepted: the bonus from p̃ after them)."""
    p = warp.probs(logits)
    n_drafts = tokens.numel()
    if n_drafts == 0:  # no lookup this round: the count stays a device value too (one read per round)
        return torch.zeros((), dtype=torch.long, device=p.device), p[0]
    u = torch.rand(n_drafts, generator=generator, device=p.device)
    ok = u < p[torch.arange(n_drafts, device=p.device), tokens]
    n = ok.long().cumprod(0).sum()  # 0-d, on the device
    p_n = _row(p, n)
    rest = p_n.scatter(0, _row(torch.cat([tokens, tokens[:1] * 0]), n).reshape(1), 0.0)  # p̃ without x_n
    total = rest.sum()
    dist = torch.where((n < n_drafts) & (total > 0), rest / total.clamp_min(1e-30), p_n)
    return n, dist


def greedy_select(p: torch.Tensor, q: torch.Tensor | None, tokens: torch.Tensor,
                  generator) -> tuple[int | None, torch.Tensor]:
    """Greedy selection: the first candidate equal to the target's argmax (p is one-hot when greedy)."""
    return _one_node(greedy_rows, p, q, tokens, generator)


#: every selection rule's form over M nodes at once (``(p (M, V), q (M, V) | None, tokens (M, K), valid (M, K),
#: generator) -> (accepted index or −1 (M,), correction distributions (M, V))``): what the tree walk runs
ROWS: dict[Callable, RowRule] = {multi_step_select: multi_step_rows,
                                 multi_step_select_without_replacement: partial(multi_step_rows, replacement=False),
                                 k_sequential_select: k_sequential_rows, point_mass_select: point_mass_rows,
                                 greedy_select: greedy_rows, typical_select: typical_rows}
#: the rules with no correction (the token after the walk comes from p̃ where it stops): their rows are not warped
NO_CORRECTION = frozenset({typical_select})
#: the row rules that take ``max_multi`` (a bound on the rows with several candidates; :func:`k_sequential_rows`)
TAKES_MAX_MULTI = frozenset({k_sequential_select})
