"""Exact distributions of toy models, and the statistics that compare samples with them.

* :func:`exact_sequence_distribution` — the exact probability of every continuation under AR sampling
  from T∘p (by enumeration over a toy vocabulary);
* :func:`total_variation` and :func:`tv_bound` — TV distance of samples from it, and a high-probability
  bound for n i.i.d. samples;
* :func:`chi_square_pvalue` — Pearson's χ² goodness of fit (rare outcomes pooled);
* :func:`sample_generations` — a decoder's samples (seeds 0 … n − 1).
"""
from __future__ import annotations

import itertools
import math
from collections import Counter

import torch

from harness.primitives.warping import Warp


@torch.no_grad()
def next_token_probs(model, prefix: list[int], warp: Warp) -> torch.Tensor:
    """T∘p(· | prefix) by a full (uncached) forward: the reference every decoder must match."""
    logits = model(input_ids=torch.tensor([prefix])).logits[0, -1].float()
    return warp.probs(logits)


@torch.no_grad()
def exact_sequence_distribution(model, prompt: list[int], length: int, warp: Warp,
                                eos_token_id: int | None = None) -> dict[tuple[int, ...], float]:
    """Exact probability of every continuation of ``length`` tokens under AR sampling from T∘p.

    With an EOS id, sequences end at EOS (shorter tuples). Enumerates V^length prefixes.
    """
    dist: dict[tuple[int, ...], float] = {}
    frontier: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        nxt: dict[tuple[int, ...], float] = {}
        for seq, pr in frontier.items():
            probs = next_token_probs(model, prompt + list(seq), warp)
            for tok in torch.nonzero(probs > 0).flatten().tolist():
                s, q = seq + (tok,), pr * float(probs[tok])
                if eos_token_id is not None and tok == eos_token_id:
                    dist[s] = dist.get(s, 0.0) + q
                else:
                    nxt[s] = q
        frontier = nxt
    for s, q in frontier.items():
        dist[s] = dist.get(s, 0.0) + q
    return dist


def sample_generations(decoder, prompt: list[int], length: int, n: int) -> list:
    """``n`` generations of ``decoder`` from ``prompt`` (seeds 0 … n − 1): an exactness test's samples."""
    return [decoder.generate(prompt, length, seed=s) for s in range(n)]


def total_variation(samples: list[tuple[int, ...]], exact: dict[tuple[int, ...], float]) -> float:
    """TV distance between the empirical distribution of ``samples`` and ``exact``."""
    counts = Counter(samples)
    n = len(samples)
    keys = set(counts) | set(exact)
    return 0.5 * sum(abs(counts.get(k, 0) / n - exact.get(k, 0.0)) for k in keys)


def tv_bound(exact: dict, n: int, delta: float = 1e-3) -> float:
    """High-probability bound on TV(empirical, exact) for n i.i.d. samples (probability ≥ 1 − delta).

    E[TV] ≤ ½ Σ_k sqrt(p_k (1 − p_k) / n), and TV is a ½·(2/n)-bounded-difference function of the
    samples, so by McDiarmid TV ≤ E[TV] + sqrt(ln(1/δ) / (2n)).
    """
    expected = 0.5 * sum(math.sqrt(p * (1 - p) / n) for p in exact.values())
    return expected + math.sqrt(math.log(1 / delta) / (2 * n))


def all_sequences(vocab_size: int, length: int):
    return itertools.product(range(vocab_size), repeat=length)


def chi_square_pvalue(samples: list, exact: dict, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness-of-fit p-value of ``samples`` against ``exact`` probabilities.

    Outcomes expected fewer than ``min_expected`` times are pooled into one cell (the usual
    validity condition); a sample outside the support of ``exact`` gives p = 0.
    """
    from scipy.stats import chisquare

    counts = Counter(samples)
    n = len(samples)
    if any(k not in exact or exact[k] <= 0 for k in counts):
        return 0.0
    observed, expected, pool_obs, pool_exp = [], [], 0, 0.0
    for k, p in exact.items():
        if n * p >= min_expected:
            observed.append(counts.get(k, 0))
            expected.append(n * p)
        else:
            pool_obs += counts.get(k, 0)
            pool_exp += n * p
    if pool_exp > 0:
        observed.append(pool_obs)
        expected.append(pool_exp)
    if len(observed) < 2:
        return 1.0
    scale = sum(observed) / sum(expected)  # absorb float rounding of the exact probabilities
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)
