"""Test helpers for γ policies, without models.

* :func:`simulate_rounds` — drives a policy through simulated rounds: each draft accepted
  independently with probability β (so accept lengths are geometric, censored at γ + 1),
  draft and verification times from known a_q and b_p(γ);
* :class:`ToyChainSD` — exact speculative sampling (Leviathan et al. 2023) on a toy Markov
  draft/target pair with an enumerable vocabulary, driven by a policy through the seam, and the
  exact target distribution of its output, so a test can show which policies keep it lossless;
* :class:`PeekingPolicy` — a policy that cheats: it dry-runs the current round at several
  depths and keeps the longest that will be fully accepted. Its output is biased towards
  accepted drafts, so exact-distribution tests must reject it (they do for :class:`ToyChainSD`;
  the decoders' tests give it a ``dry_run`` that snapshots the caches and the generator).
"""
from __future__ import annotations

import itertools
import math
import random
from typing import Callable, Sequence

from harness.primitives.gamma_policy import GammaPolicy, RoundObservation


def censored_geometric(beta: float, gamma: int, rng: random.Random) -> int:
    """Drafts accepted in a round of depth γ when each is accepted with probability β."""
    n = 0
    while n < gamma and rng.random() < beta:
        n += 1
    return n


def truncated_geometric(beta: float, gamma: int, rng: random.Random) -> int:
    """An accept length y ∈ 1..γ+1 drawn from App. B.2's Eq. 11 (geometric conditioned on y ≤ γ+1)."""
    weights = [beta ** (y - 1) for y in range(1, gamma + 2)]
    return rng.choices(range(1, gamma + 2), weights=weights)[0]


def simulate_rounds(policy: GammaPolicy, rounds: int, beta: float | Callable[[int], float], a_q: float,
                    b_p: Callable[[int], float], rng: random.Random, prompt: Sequence[int] = (0,),
                    vocab: int = 50, rounds_per_generation: int | None = None, time_noise: float = 0.0) -> list[int]:
    """Run ``rounds`` simulated rounds (``reset`` every ``rounds_per_generation``); return the γ used.

    ``beta`` may depend on the round index (a changing context). Times: draft a_q·γ, verification
    b_p(γ), each times (1 + ``time_noise``·N(0, 1)) if noisy. Committed tokens are drawn from
    ``range(vocab)`` (for cache-based policies).
    """
    gammas = []
    policy.reset(list(prompt))
    for r in range(rounds):
        if rounds_per_generation and r and r % rounds_per_generation == 0:
            policy.reset(list(prompt))
        g = policy.next_gamma()
        b = beta(r) if callable(beta) else beta
        acc = censored_geometric(b, g, rng)
        noise = (lambda: max(0.05, 1 + time_noise * rng.gauss(0, 1))) if time_noise else (lambda: 1.0)
        committed = tuple(rng.randrange(vocab) for _ in range(acc + 1))
        policy.observe(RoundObservation(gamma=g, accepted=acc, draft_nodes=g, committed=committed,
                                        draft_time_s=a_q * g * noise(), verify_time_s=b_p(g) * noise()))
        gammas.append(g)
    return gammas


class ToyChainSD:
    """Speculative sampling of a chain on a toy first-order Markov pair, driven by a γ policy.

    ``p[a][b]`` / ``q[a][b]``: target / draft probability of token b after token a. The loop
    mirrors the harness's: depth = max(1, min(γ, tokens still needed − 1)), γ = 0 a plain target
    step; each round is Leviathan et al.'s Alg. 1 (accept x with probability min(1, p/q), else
    draw from norm(max(0, p − q)); a bonus token from p after γ acceptances).
    """

    def __init__(self, p: list[list[float]], q: list[list[float]], start: int = 0, a_q: float = 0.1,
                 b_p: Callable[[int], float] = lambda g: 1.0 + 0.05 * g):
        self.p, self.q, self.start = p, q, start
        self.a_q, self.b_p = a_q, b_p  # the times reported to the policy (a simulated cost model)
        self.vocab = range(len(p))
        self.rng = random.Random(0)
        self.prev = start
        self.depths: list[int] = []    # every round's depth, for tests that γ really varied

    def _draw(self, dist: Sequence[float]) -> int:
        return self.rng.choices(self.vocab, weights=dist)[0]

    def _round(self, gamma: int) -> tuple[int, list[int]]:
        prev, out = self.prev, []
        drafts = []
        for _ in range(gamma):
            x = self._draw(self.q[prev])
            drafts.append((prev, x))
            prev = x
        for a, x in drafts:
            p, q = self.p[a][x], self.q[a][x]
            if self.rng.random() * q < p:
                out.append(x)
                continue
            resid = [max(0.0, pp - qq) for pp, qq in zip(self.p[a], self.q[a])]
            out.append(self._draw(resid))
            return len(out) - 1, out
        last = out[-1] if out else self.prev
        out.append(self._draw(self.p[last]))
        return gamma, out

    def dry_run(self, gamma: int) -> int:
        """Drafts the coming round would accept at depth γ (the random stream is restored)."""
        state = self.rng.getstate()
        accepted, _ = self._round(gamma)
        self.rng.setstate(state)
        return accepted

    def generate(self, policy: GammaPolicy, n_tokens: int) -> tuple[int, ...]:
        self.prev = self.start
        policy.reset([self.start])
        out: list[int] = []
        while len(out) < n_tokens:
            g = policy.next_gamma()
            depth = 0 if g == 0 else max(1, min(g, n_tokens - len(out) - 1))
            accepted, tokens = self._round(depth)
            self.depths.append(depth)
            policy.observe(RoundObservation(gamma=depth, accepted=accepted, draft_nodes=depth, committed=tuple(tokens),
                                            draft_time_s=self.a_q * depth, verify_time_s=self.b_p(depth)))
            out.extend(tokens)
            self.prev = tokens[-1]
        return tuple(out[:n_tokens])

    def exact(self, n_tokens: int) -> dict[tuple[int, ...], float]:
        """The target's exact distribution of the next ``n_tokens`` tokens."""
        dist = {}
        for seq in itertools.product(self.vocab, repeat=n_tokens):
            pr, prev = 1.0, self.start
            for x in seq:
                pr *= self.p[prev][x]
                prev = x
            dist[seq] = pr
        return dist


def chi_square_pvalue(samples: Sequence[tuple], exact: dict[tuple, float]) -> float:
    """Pearson χ² goodness-of-fit p-value of ``samples`` against ``exact`` (scipy.stats.chisquare)."""
    from collections import Counter

    from scipy.stats import chisquare

    counts = Counter(samples)
    keys = [k for k, v in exact.items() if v > 0]
    n = len(samples)
    obs = [counts.get(k, 0) for k in keys]
    if sum(obs) != n:
        return 0.0  # a sample outside the support
    exp = [exact[k] * n for k in keys]
    return float(chisquare(obs, exp).pvalue)


class PeekingPolicy(GammaPolicy):
    """A cheating policy: γ chosen by looking at the current round's outcome.

    ``dry_run(γ)`` must return how many drafts the coming round would accept at depth γ,
    without side effects. The policy picks the largest γ in ``gammas`` whose dry run is fully
    accepted, else the smallest. It only ever chooses among honest rounds, yet its output is
    biased towards drafts the target accepts: lossless-decoding tests must fail with it (in
    sampling mode; greedy output is the target's argmax whatever γ).
    """

    def __init__(self, dry_run: Callable[[int], int] | None = None, gammas: Sequence[int] = (1, 3)):
        self.dry_run = dry_run
        self.gammas = sorted(gammas)

    def reset(self, prompt_ids: list[int]) -> None:
        pass

    def next_gamma(self) -> int:
        if self.dry_run is None:
            raise RuntimeError("PeekingPolicy needs a dry_run(gamma) -> accepted callable")
        for g in reversed(self.gammas):
            if self.dry_run(g) >= g:
                return g
        return self.gammas[0]

    def observe(self, obs: RoundObservation) -> None:
        pass


def objective_argmax(acc: float, a_q: float, b_p: Callable[[int], float], gamma_min: int, gamma_max: int) -> int:
    """Brute-force argmax of Eq. 1 (independent of :mod:`harness.adaptive.estimators`, for tests)."""
    vals = {g: sum(acc ** i for i in range(g + 1)) / (g * a_q + b_p(g)) for g in range(gamma_min, gamma_max + 1)}
    return max(vals, key=lambda g: (vals[g], -g))

