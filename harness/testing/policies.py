"""Test helpers for γ policies, without models.

* :func:`simulate_rounds` — drives a policy through simulated rounds: each draft accepted
  independently with probability β (so accept lengths are geometric, censored at γ + 1),
  draft and verification times from known a_q and b_p(γ);
* :class:`PeekingPolicy` — a policy that cheats: it dry-runs the current round at several
  depths and keeps the longest that will be fully accepted. Its output is biased towards
  accepted drafts, so the decoders' exact-distribution tests must reject it (they give it a
  ``dry_run`` that snapshots the caches and the random stream: :func:`peek_rounds`);
* :class:`ScriptedPolicy` — given depths in turn, recording every round it observes;
* :func:`objective_argmax` — Eq. 1's argmax by brute force, independent of the estimators.
"""
from __future__ import annotations

import copy
import random
from typing import Callable, Sequence

from harness.primitives.gamma_policy import GammaPolicy
from harness.primitives.round import Round


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
        policy.observe(Round(committed, gamma=g, accepted=acc, draft_nodes=g, draft_time_s=a_q * g * noise(),
                             verify_time_s=b_p(g) * noise()))
        gammas.append(g)
    return gammas


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

    def observe(self, obs: Round) -> None:
        pass


class ScriptedPolicy(GammaPolicy):
    """Cycles through the given depths (0 = a plain target step) and records what it is told: its resets
    (``resets``), the depths it gave (``requested``) and the rounds it observed (``seen``)."""

    def __init__(self, depths: Sequence[int]):
        self.depths, self.i = list(depths), 0
        self.seen: list[Round] = []
        self.resets: list[list[int]] = []
        self.requested: list[int] = []

    def reset(self, prompt_ids: list[int]) -> None:
        self.resets.append(list(prompt_ids))

    def next_gamma(self) -> int:
        self.i += 1
        self.requested.append(self.depths[(self.i - 1) % len(self.depths)])
        return self.requested[-1]

    def observe(self, obs: Round) -> None:
        self.seen.append(obs)


def objective_argmax(acc: float, a_q: float, b_p: Callable[[int], float], gamma_min: int, gamma_max: int) -> int:
    """Brute-force argmax of Eq. 1 (independent of :mod:`harness.adaptive.estimators`, for tests)."""
    vals = {g: sum(acc ** i for i in range(g + 1)) / (g * a_q + b_p(g)) for g in range(gamma_min, gamma_max + 1)}
    return max(vals, key=lambda g: (vals[g], -g))



def peek_rounds(decoder, policy: PeekingPolicy) -> None:
    """Give ``policy`` a ``dry_run(γ)`` on ``decoder`` (a :class:`~harness.decoders.speculative.SpeculativeDecoder`):
    it runs the coming round on copies of the caches and the random stream and returns its accepted drafts,
    leaving no trace (the cheat an exactness test must catch)."""
    start = decoder.start

    def start_and_peek(prompt_ids, generator):
        spec = start(prompt_ids, generator)

        def dry_run(gamma: int) -> int:
            caches, state, tokens = spec.caches, spec.generator.get_state(), list(spec.tokens)
            spec.caches = copy.deepcopy(caches)
            try:
                return decoder.round(spec, gamma).accepted
            finally:
                spec.caches, spec.tokens = caches, tokens
                spec.generator.set_state(state)
        policy.dry_run = dry_run
        return spec
    decoder.start = start_and_peek
