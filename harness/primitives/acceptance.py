"""Acceptance rules of speculative decoding: pure functions of distributions, drafts and a generator.

Two families, each with ONE signature:

* chain rules — :data:`ChainRule` ``(logits (n+1, V), drafts (n,)) -> (kept, next token)``: how many
  drafts of a chain to keep and the token that follows them. :func:`accept_chain` (Leviathan et al.
  2023 Alg. 1, seed 000 §2.2 steps 1-3) and :func:`accept_chain_greedy` are the lossless ones;
  decoders adapt them (or their own criteria: MTAD, BiLD, typical) to this signature.
* selection rules — :data:`SelectionRule` ``(p (V,), q (V,) | None, candidates (k,), generator) ->
  (index of the accepted candidate or None, distribution of the correction token)``: one node of a
  token tree. :func:`multi_step_select` (SpecInfer), :func:`multi_step_select_without_replacement`
  (MCSD Alg. 2), :func:`k_sequential_select` (Spectr's K-SEQ) and :func:`greedy_select`.

A new lossless tree method is one selection rule here plus one decoder class.
Warping: every rule compares warped distributions p̃ = T∘p and q̃ = T∘q (seed 000 §2.2).
"""
from __future__ import annotations

from typing import Callable

import torch

from harness.primitives.sampling import residual, sample

ChainRule = Callable[[torch.Tensor, torch.Tensor], tuple[int, int]]
SelectionRule = Callable[[torch.Tensor, "torch.Tensor | None", torch.Tensor, "torch.Generator | None"],
                         tuple["int | None", torch.Tensor]]


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


def multi_step_select_without_replacement(p: torch.Tensor, q: torch.Tensor, tokens: torch.Tensor,
                                          generator) -> tuple[int | None, torch.Tensor]:
    """MCSD's selection (seed 003 §2.2; Yang et al. 2024 Alg. 2): candidates drawn without replacement."""
    return multi_step_select(p, q, tokens, generator, replacement=False)


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


def greedy_select(p: torch.Tensor, q: torch.Tensor | None, tokens: torch.Tensor,
                  generator) -> tuple[int | None, torch.Tensor]:
    """Greedy selection: the first candidate equal to the target's argmax (p is one-hot when greedy)."""
    hits = torch.nonzero(tokens == p.argmax()).flatten()
    return (int(hits[0]) if hits.numel() else None), p
