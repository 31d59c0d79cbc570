"""Verification of one draft layer of speculative beam decoding, and its dynamic width (dsbd §3.1-3.2).

Distributions live on a flat outcome space (a beam = one (input beam, next token) pair). ``p_beam``
is the target's T∘p_beam, ``q_beam`` the distribution the draft beams of this layer were drawn
from, i.i.d. (dsbd Eq. 1 applied to the draft model q).

Acceptance rule. Algorithm 1 line 16 and §3.1 write the test as r ≤ q_beam/p'. The correctness
proof (App. A, Eq. 13 and 15) needs the speculative-sampling test r ≤ min(1, p'/q_beam): only then
is P(output = x) = p_beam(x) (Theorem 3.1). We implement what the proof requires.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.errors import ConfigError
from harness.primitives.sampling import residual, sample


def acceptance_rates(p_beam: torch.Tensor, q_beam: torch.Tensor, num_drafts: int) -> list[float]:
    """α_1..α_m of Eq. 4: α_j = Σ min(p_j, q_beam), p_1 = p_beam, p_{j+1} = norm(max(p_j − q_beam, 0))."""
    alphas, p_j = [], p_beam
    for _ in range(num_drafts):
        alphas.append(float(torch.minimum(p_j, q_beam).sum().clamp(0.0, 1.0)))
        p_j = residual(p_j, q_beam)
    return alphas


def acceptance_count_distribution(alphas: list[float]) -> list[float]:
    """P(m, k) for k = 0..m: the probability that k of the m draft beams are accepted (Eq. 2-3).

    Every draft is verified (no early stop at W_L), p' resets to p_beam after each acceptance,
    so after an acceptance at draft i the remaining m − i drafts restart the α chain. Base cases:
    P(0, 0) = 1 and P(m, 0) = Π_{j ≤ m} (1 − α_j) (all rejected).
    """
    m = len(alphas)
    none_accepted = [1.0]
    for a in alphas:
        none_accepted.append(none_accepted[-1] * (1.0 - a))
    first_accepted = [alphas[i - 1] * none_accepted[i - 1] for i in range(1, m + 1)]  # P~(·, i), Eq. 3
    table = [[0.0] * (m + 1) for _ in range(m + 1)]  # table[n][k] = P(n, k)
    for n in range(m + 1):
        table[n][0] = none_accepted[n]
        for k in range(1, n + 1):
            table[n][k] = sum(first_accepted[i - 1] * table[n - i][k - 1] for i in range(1, n + 1))
    return table[m]


def dynamic_width(alphas: list[float], threshold: float, min_width: int) -> int:
    """W_L^(l) = max(W_min, W~_L(t)), W~_L(t) = max{K : P(at least K of m accepted) ≥ t} (Eq. 6-7).

    Eq. 5 prints the sum from k = 1; Eq. 7's sum from k = 0 is the probability of "at least K", used here.
    """
    counts = acceptance_count_distribution(alphas)
    at_least, widest = 1.0, 0
    for k in range(len(counts)):
        if at_least >= threshold - 1e-12:
            widest = k
        at_least -= counts[k]
    return max(min_width, widest)


@dataclass
class VerifiedLayer:
    """Outcome of Algorithm 1 on one layer: ``width`` output beams (flat outcome indices).

    ``draft_slot[i]`` is the position in ``candidates`` of an accepted draft beam, or −1 for a beam
    sampled in the fill-up (lines 26-29). ``passed`` is True when ``width`` drafts were accepted.
    """

    outcomes: torch.Tensor
    draft_slot: list[int]
    passed: bool


def verify_layer(p_beam: torch.Tensor, q_beam: torch.Tensor, candidates: torch.Tensor, width: int,
                 generator: torch.Generator | None) -> VerifiedLayer:
    """Algorithm 1, lines 13-31, for one layer, with the acceptance test of the App. A proof.

    Drafts are tested in order: accept with probability min(1, p'/q_beam) and reset p' ← p_beam;
    on rejection p' ← norm(max(0, p' − q_beam)). Stop once ``width`` are accepted. Otherwise fill
    up: one beam from p', then from p_beam until ``width`` beams (Theorem 3.1: i.i.d. p_beam).
    """
    if width < 1:
        raise ConfigError(f"layer width must be >= 1, got {width}")
    cand = candidates.tolist()
    uniforms = torch.rand(len(cand), generator=generator, device=p_beam.device).tolist() if cand else []
    p_res = p_beam
    accepted: list[int] = []
    slots: list[int] = []
    for slot, (x, r) in enumerate(zip(cand, uniforms)):
        px, qx = float(p_res[x]), float(q_beam[x])
        if qx > 0 and r < min(1.0, px / qx):
            accepted.append(x)
            slots.append(slot)
            p_res = p_beam
            if len(accepted) == width:
                return VerifiedLayer(torch.tensor(accepted, device=p_beam.device), slots, True)
        else:
            p_res = residual(p_res, q_beam)
    fill = [int(sample(p_res, generator)[0])]
    if width - len(accepted) > 1:
        fill += sample(p_beam, generator, width - len(accepted) - 1).tolist()
    outcomes = torch.tensor(accepted + fill, device=p_beam.device)
    return VerifiedLayer(outcomes, slots + [-1] * len(fill), False)
