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
from functools import lru_cache

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


# ------------------------------------------------------------------ the same rules in row form, on the device
# The functions above are the definitions (host loops over Python floats: one device read per draft). Those below
# compute the same quantities with tensor operations only and static shapes, so that a decoder verifies a whole
# forest without reading a device value (issue 28 item 2); tests/primitives/test_beam_verify_rows.py holds each to
# its definition.


def residual_chain(p_beam: torch.Tensor, q_beam: torch.Tensor, n: int) -> torch.Tensor:
    """(n + 1, N): p_1 = p_beam, p_{j+1} = norm(max(p_j − q_beam, 0)) — Eq. 4's chain. It is also the verification's
    p' after r rejections in a row since the last acceptance (p' resets to p_beam on acceptance): p' = chain[r]."""
    rows = [p_beam]
    for _ in range(n):
        rows.append(residual(rows[-1], q_beam))
    return torch.stack(rows)


def rates_of_chain(chain: torch.Tensor, q_beam: torch.Tensor) -> torch.Tensor:
    """α_1..α_n (float64) of :func:`acceptance_rates` from its :func:`residual_chain` (n + 1 rows)."""
    return torch.minimum(chain[:-1], q_beam).sum(-1).clamp(0.0, 1.0).double()


def count_distributions(alphas: torch.Tensor) -> torch.Tensor:
    """(n + 1, n + 1): row m is :func:`acceptance_count_distribution` of the first m rates (zeros past k = m).

    Column k is L^k · none, with none[m] = Π_{j ≤ m} (1 − α_j) = P(m, 0) and L[m, m'] = P~(·, m − m') (Eq. 3) below
    the diagonal: Eq. 2's P(m, k) = Σ_i P~(·, i) P(m − i, k − 1) is one product per column."""
    n = alphas.numel()
    none = torch.cat([alphas.new_ones(1), torch.cumprod(1.0 - alphas, 0)])
    first = alphas * none[:-1]  # P~(·, i), Eq. 3
    below, lag = _lags(n + 1, str(alphas.device))
    lower = torch.where(below, first.take(lag), 0.0) if n else alphas.new_zeros(1, 1)
    columns = [none]
    for _ in range(n):
        columns.append(lower @ columns[-1])
    return torch.stack(columns, dim=1)


@lru_cache(maxsize=32)
def _lags(size: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(size, size): below the diagonal, and row − column − 1 there (the index of P~ in the lower-triangular Toeplitz
    matrix of Eq. 2; clamped to 0..size − 2 elsewhere)."""
    i = torch.arange(size, device=device)
    lag = i[:, None] - i[None, :] - 1
    return lag >= 0, lag.clamp(0, max(size - 2, 0))


@lru_cache(maxsize=32)
def _arange(size: int, device: str) -> torch.Tensor:
    return torch.arange(size, device=device)


def dynamic_width_rows(counts: torch.Tensor, m: torch.Tensor, threshold: float, min_width: int) -> torch.Tensor:
    """:func:`dynamic_width` from P(m, ·) (``counts``, padded with zeros past k = m) and m: a () long tensor."""
    k = _arange(counts.numel(), str(counts.device))
    at_least = 1.0 - (torch.cumsum(counts, 0) - counts)
    ok = (at_least >= threshold - 1e-12) & (k <= m)
    return (k * ok).max().clamp_min(min_width)


@lru_cache(maxsize=32)
def _scan_constants(n: int, size: int, device: str) -> tuple[torch.Tensor, ...]:
    """The scan's states (r, c) ↦ c·(n + 1) + r: r and c per state, the next state after a rejection (r + 1) and
    after an acceptance (r = 0, c + 1), the state itself, the drafts 0..n − 1, the output slots 0..size − 1 and the
    start state (1,)."""
    state = torch.arange((n + 1) * (n + 1), device=device)
    run, count = state % (n + 1), state // (n + 1)
    stay = count * (n + 1) + (run + 1).clamp_max(n)
    move = (count + 1).clamp_max(n) * (n + 1)
    return (run, count, stay, move, state, torch.arange(n, device=device), torch.arange(size, device=device),
            torch.zeros(1, dtype=torch.long, device=device))


@dataclass
class RowVerdict:
    """:class:`VerifiedLayer` padded to ``size`` output slots, on the device: slots ≥ ``width`` are unused.
    ``draft`` is the accepted draft's index among the layer's drafts (−1: a fill-up beam); ``accepted`` the count;
    ``slot`` each draft's output slot (−1: not accepted)."""

    outcomes: torch.Tensor
    draft: torch.Tensor
    accepted: torch.Tensor
    passed: torch.Tensor
    slot: torch.Tensor


def verify_layer_rows(chain: torch.Tensor, q_beam: torch.Tensor, candidates: torch.Tensor, survivor: torch.Tensor,
                      width: torch.Tensor, size: int, generator: torch.Generator | None) -> RowVerdict:
    """:func:`verify_layer` without host reads. ``candidates`` (n,) are the layer's drafts as outcomes, tested in
    order where ``survivor`` (the others are skipped); ``chain`` is :func:`residual_chain` of (p_beam, q_beam) with
    n + 1 rows; ``width`` a () long tensor ≤ ``size``. The sequential test is a scan over the states (run of
    rejections r, accepted count c): draft j's decision at every state is computed at once (p' = chain[r], the
    same test min(1, p'/q_beam) in float64 as the host's), then the scan is one lookup per draft. Random stream: n
    uniforms, one draw from p', ``size`` − 1 from p_beam (the host draws only what it uses: same law)."""
    n, dev = candidates.numel(), candidates.device
    run, count, stay, move, same, drafts, k, start = _scan_constants(n, size, str(dev))
    u = torch.rand(n, generator=generator, device=dev).double()
    qx = q_beam.index_select(0, candidates).double().unsqueeze(1)  # index_select, not [ ]: fewer host cycles
    # u < min(1, p'/q) is u < p'/q (u < 1); the ratio is inf or nan where q_beam = 0: never accepted (qx > 0)
    ok = (u.unsqueeze(1) < chain.index_select(1, candidates).T.double() / qx) & (qx > 0)  # (n, r): j accepted after r
    active = survivor.unsqueeze(1) & (count < width)  # (n, states)
    nxt = torch.where(active & ok.index_select(1, run), move, torch.where(active, stay, same))
    state, trail = start, [start]
    for row in nxt.unbind(0):
        state = row.index_select(0, state)
        trail.append(state)
    states = torch.cat(trail)
    counts = states // (n + 1)
    acc, accepted = counts[1:] > counts[:-1], counts[-1]
    order = torch.cumsum(acc, 0) - 1  # accepted drafts in order; the rest to a dump slot
    draft = candidates.new_full((size + 1,), -1).scatter_(0, torch.where(acc, order, size), drafts)[:size]
    fills = sample(chain.index_select(0, states[-1:] % (n + 1))[0], generator)
    if size > 1:
        fills = torch.cat([fills, sample(chain[0], generator, size - 1)])
    taken = k < accepted
    outcomes = torch.where(taken, candidates.index_select(0, draft.clamp_min(0)),
                           fills.index_select(0, (k - accepted).clamp(0, size - 1)))
    return RowVerdict(outcomes, draft, accepted, accepted >= width, torch.where(acc, order, -1))
