"""Acceptance rules of speculative sampling, one node (or chain) at a time: output ~ p exactly, for any draft q.

Each lossless rule gets candidates drawn from q as its decoder draws them, many times over; the
empirical distribution of the emitted token must match p (TV below the n-sample bound and a
chi-square test), while q is far from p (so a rule that returned draft tokens would fail). This is the
proof of exactness per rule; each round driver (chain, tree walk, best root) is proven once end to end by the
decoders' tests. The lossy rules (MTAD, BiLD, typical) are checked against their definitions.
"""
import pytest
import torch

from harness.primitives.sampling import make_generator, sample
from harness.primitives.acceptance import (accept_chain, bild_rule, greedy_chain, k_sequential_rho,
                                           k_sequential_select, multi_step_select, speculative_sampling, typical_rule)
from harness.primitives.drafting import draw_children
from harness.primitives.warping import Warp
from harness.testing import chi_square_pvalue, total_variation, tv_bound

V = 6
N = 6000


def _dists():
    """p and q with different supports (as top-k/top-p leave them) and p far from q."""
    p = torch.tensor([0.05, 0.30, 0.0, 0.25, 0.40, 0.0])
    q = torch.tensor([0.35, 0.05, 0.30, 0.20, 0.10, 0.0])
    return p, q


def _check(samples, p):
    exact = {(i,): float(p[i]) for i in range(V) if p[i] > 0}
    samples = [(s,) for s in samples]
    n = len(samples)
    tv = total_variation(samples, exact)
    assert tv < tv_bound(exact, n), (tv, tv_bound(exact, n))
    assert chi_square_pvalue(samples, exact) > 1e-4


def test_test_has_power():
    p, q = _dists()
    exact_p = {(i,): float(p[i]) for i in range(V) if p[i] > 0}
    draft_like = {(i,): float(q[i]) for i in range(V) if q[i] > 0}
    assert 0.5 * sum(abs(exact_p.get(k, 0) - draft_like.get(k, 0)) for k in set(exact_p) | set(draft_like)) > \
        4 * tv_bound(exact_p, N)


def test_accept_chain_single_position_follows_p():
    p, q = _dists()
    g = make_generator(0, "cpu")
    p2 = torch.stack([p, p.roll(1)])  # second row: bonus distribution (unused for the first token)
    out = []
    for _ in range(N):
        x = sample(q, g)
        n, dist = accept_chain(p2, q[None], x, g)
        out.append(int(x[0]) if n == 1 else int(sample(dist, g)[0]))
    _check(out, p)


def test_accept_chain_two_positions_joint():
    """Two drafts: the pair (first, second) emitted token follows p1 × p2 when p2 does not depend on x1."""
    p, q = _dists()
    p_second, q_second = p.roll(2), q.roll(3)
    g = make_generator(1, "cpu")
    P = torch.stack([p, p_second, p.roll(4)])
    Q = torch.stack([q, q_second])
    out = []
    for _ in range(N):
        x = torch.cat([sample(q, g), sample(q_second, g)])
        n, dist = accept_chain(P, Q, x, g)
        seq = x[:n].tolist() + [int(sample(dist, g)[0])]
        if len(seq) == 1:  # first rejected: the second token would come from the next iteration
            seq.append(int(sample(p_second, g)[0]))
        out.append(tuple(seq[:2]))
    exact = {(a, b): float(p[a] * p_second[b]) for a in range(V) for b in range(V) if p[a] * p_second[b] > 0}
    tv = total_variation(out, exact)
    assert tv < tv_bound(exact, N), (tv, tv_bound(exact, N))
    assert chi_square_pvalue(out, exact) > 1e-4


def test_greedy_chain():
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 1.0], [0.0, 0.0, 5.0]])
    for drafts, kept, nxt in (([1, 0], 2, 2), ([1, 2], 1, 0), ([2, 0], 0, 1)):
        n, dist = greedy_chain(logits, torch.tensor(drafts))
        assert (n, int(dist.argmax())) == (kept, nxt)


def test_speculative_sampling_is_accept_chain_on_the_drafted_chain():
    """The chain rule stacks q̃ of the drafted chain; without drafts it is the target's own distribution."""
    from types import SimpleNamespace

    from harness.primitives.warping import Warp

    warp, g1, g2 = Warp(1.0), make_generator(5, "cpu"), make_generator(5, "cpu")
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(0))
    p, q = warp.probs(logits), warp.probs(torch.randn(2, V, generator=torch.Generator().manual_seed(1)))
    chain = SimpleNamespace(root_q=q[0], node_q=q[1:])
    tokens = torch.tensor([1, 3])
    n, dist = speculative_sampling(logits, tokens, chain, warp, g1)
    n_ref, dist_ref = accept_chain(p, q, tokens, g2)
    assert n == n_ref and torch.equal(dist, dist_ref)
    assert speculative_sampling(logits[:1], tokens[:0], SimpleNamespace(root_q=None), warp, g1)[0] == 0


def test_lossy_chain_rules_keep_what_their_definitions_keep():
    from harness.primitives.warping import Warp

    warp = Warp(1.0)
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1], [0.05, 0.05, 0.9], [0.4, 0.3, 0.3]]))
    tokens = torch.tensor([0, 1])  # NLLs −log 0.7 = 0.36 and −log 0.05 = 3.0
    kept, dist = bild_rule(logits, tokens, None, warp, None, threshold=2.0)
    assert kept == 1 and torch.allclose(dist, warp.probs(logits[1]))
    assert bild_rule(logits, tokens, None, warp, None, threshold=3.5)[0] == 2
    kept, dist = typical_rule(logits, tokens, None, warp, None, epsilon=0.09, delta=0.3)
    assert kept == 1 and torch.allclose(dist, warp.probs(logits[1]))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_multi_step_with_replacement_follows_p(k):
    p, q = _dists()
    g = make_generator(10 + k, "cpu")
    out = []
    for _ in range(N):
        cands = sample(q, g, k)
        idx, dist = multi_step_select(p, q, cands, g, replacement=True)
        out.append(int(cands[idx]) if idx is not None else int(sample(dist, g)[0]))
    _check(out, p)


@pytest.mark.parametrize("k", [2, 4])
def test_multi_step_without_replacement_follows_p(k):
    """MCSD's variant: Gumbel-top-k draws without replacement, q renormalised after each rejection.

    With k = 4 > |supp q| − 1 some rows have fewer candidates than asked for.
    """
    p, q = _dists()
    g = make_generator(20 + k, "cpu")
    warp = Warp(1.0)
    out = []
    for _ in range(N):
        cands, valid = draw_children(q[None], q.log()[None], k, warp, False, g)
        cands = cands[valid] if valid is not None else cands[0]
        assert len(set(cands.tolist())) == cands.numel()
        idx, dist = multi_step_select(p, q, cands, g, replacement=False)
        out.append(int(cands[idx]) if idx is not None else int(sample(dist, g)[0]))
    _check(out, p)


@pytest.mark.parametrize("cands", [[4], [1, 3], [3, 3, 0], [2]])
def test_point_mass_select_follows_p_for_any_deterministic_candidates(cands):
    """Candidates fixed in advance (a lookup, a head's top tokens), duplicates and zero-probability ones too."""
    from harness.primitives.acceptance import point_mass_select

    p, _ = _dists()
    g = make_generator(40 + len(cands), "cpu")
    tokens = torch.tensor(cands)
    out = []
    for _ in range(N):
        idx, dist = point_mass_select(p, None, tokens, g)
        out.append(cands[idx] if idx is not None else int(sample(dist, g)[0]))
    _check(out, p)


@pytest.mark.parametrize("k", [2, 3])
def test_k_sequential_follows_p(k):
    p, q = _dists()
    g = make_generator(30 + k, "cpu")
    out = []
    for _ in range(N):
        cands = sample(q, g, k)
        idx, dist = k_sequential_select(p, q, cands, g)
        out.append(int(cands[idx]) if idx is not None else int(sample(dist, g)[0]))
    _check(out, p)


def test_k_sequential_rho_is_feasible_and_tight():
    p, q = _dists()
    for k in (2, 3, 5):
        rho = k_sequential_rho(p, q, k)
        beta = lambda r: float(torch.minimum(q, p / r).sum())  # noqa: E731
        assert 1 <= rho <= k
        assert 1 - (1 - beta(rho)) ** k <= rho * beta(rho) + 1e-6
        slack = 0.02 * (k - 1)
        if rho - slack >= 1:  # a noticeably smaller rho would not be feasible
            r = rho - slack
            assert 1 - (1 - beta(r)) ** k > r * beta(r)


def test_k_sequential_accepts_more_than_one_draw_sd():
    """With k candidates, Spectr accepts a draft at least as often as single-draft SD (its point)."""
    p, q = _dists()
    sd_accept = float(torch.minimum(p, q).sum())
    k = 3
    rho = k_sequential_rho(p, q, k)
    beta = float(torch.minimum(q, p / rho).sum())
    assert 1 - (1 - beta) ** k >= sd_accept

