"""Seed 004's estimators of the single-token accuracy β and its objective (Eq. 1, Eq. 2, App. B.2)."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from harness.adaptive import estimators as est
from harness.testing.policies import censored_geometric, objective_argmax, truncated_geometric

N = 3000


@pytest.mark.parametrize("beta", [0.3, 0.6, 0.85])
def test_eq2_recovers_beta_on_speculative_rounds_with_mixed_gamma(beta):
    """SD's accept lengths (each draft accepted w.p. β, censored at γ+1): Eq. 2 is their exact MLE."""
    rng = random.Random(1)
    gammas = [rng.randint(1, 8) for _ in range(N)]
    accepted = [censored_geometric(beta, g, rng) for g in gammas]
    assert est.acc_eq2(accepted, gammas, acc_max=1.0) == pytest.approx(beta, abs=0.025)


@pytest.mark.parametrize("beta,gamma", [(0.3, 2), (0.6, 4), (0.85, 6), (0.6, 1)])
def test_app_b2_mle_recovers_beta_on_truncated_geometric(beta, gamma):
    """App. B.2's model (Eq. 11): Eq. 12's root is its MLE, consistent for β."""
    rng = random.Random(2)
    ys = [truncated_geometric(beta, gamma, rng) for _ in range(N)]
    tol = 0.06 if gamma == 1 else 0.03  # γ = 1 carries little information about β
    assert est.acc_mle_truncated(ys, [gamma] * N) == pytest.approx(beta, abs=tol)


def test_app_b2_mle_with_mixed_gamma():
    rng = random.Random(3)
    gammas = [rng.randint(1, 8) for _ in range(N)]
    ys = [truncated_geometric(0.7, g, rng) for g in gammas]
    assert est.acc_mle_truncated(ys, gammas) == pytest.approx(0.7, abs=0.03)


@pytest.mark.parametrize("sampler", ["censored", "truncated"])
@pytest.mark.parametrize("beta", [0.2, 0.4])
def test_both_estimators_agree_with_true_beta_where_truncation_is_negligible(sampler, beta):
    """With β^{γ+1} ≈ 0 the censored and the truncated geometric coincide: both estimators agree with β."""
    rng = random.Random(4)
    gamma = 8
    if sampler == "censored":
        ys = [censored_geometric(beta, gamma, rng) + 1 for _ in range(N)]
    else:
        ys = [truncated_geometric(beta, gamma, rng) for _ in range(N)]
    eq2 = est.acc_eq2([y - 1 for y in ys], [gamma] * N, acc_max=1.0)
    mle = est.acc_mle_truncated(ys, [gamma] * N)
    assert eq2 == pytest.approx(beta, abs=0.025)
    assert mle == pytest.approx(beta, abs=0.025)
    assert eq2 == pytest.approx(mle, abs=0.01)


def test_the_two_models_differ_where_truncation_matters():
    """β = 0.7, γ = 4: each estimator is exact for its own model only (why both are kept, and why
    ``online`` defaults to Eq. 2, the exact MLE of what SD produces)."""
    rng = random.Random(5)
    cens = [censored_geometric(0.7, 4, rng) for _ in range(N)]
    trunc = [truncated_geometric(0.7, 4, rng) for _ in range(N)]
    assert est.acc_eq2(cens, [4] * N, 1.0) == pytest.approx(0.7, abs=0.03)
    assert est.acc_mle_truncated([a + 1 for a in cens], [4] * N) > 0.8      # B.2 over-estimates on SD rounds
    assert est.acc_eq2([y - 1 for y in trunc], [4] * N, 1.0) < 0.65          # Eq. 2 under-estimates on Eq. 11 data
    assert est.acc_mle_truncated(trunc, [4] * N) == pytest.approx(0.7, abs=0.03)


@pytest.mark.parametrize("seed", range(5))
def test_newton_solution_is_the_root_of_eq12_in_unit_interval(seed):
    rng = random.Random(seed)
    gamma = rng.randint(1, 7)
    ys = [truncated_geometric(rng.uniform(0.1, 0.9), gamma, rng) for _ in range(40)]
    if all(y == 1 for y in ys) or np.mean(ys) >= (gamma + 2) / 2:
        pytest.skip("boundary sample")
    roots = np.roots(est.eq12_coefficients(ys, gamma))
    inside = [r.real for r in roots if abs(r.imag) < 1e-9 and 1e-9 < r.real < 1 - 1e-6]
    assert len(inside) == 1  # App. B.2: one root in (0, 1)
    assert est.acc_mle_truncated(ys, [gamma] * len(ys)) == pytest.approx(inside[0], abs=1e-7)
    # ... and the MLE matches the sample mean through Eq. 13 (corrected)
    assert est.truncated_mean(inside[0], gamma) == pytest.approx(np.mean(ys), abs=1e-6)


def test_eq13_as_printed_is_off_by_one_and_the_corrected_mean_is_right():
    printed = lambda b, g: (g * b ** (g + 2) - (g + 2) * b ** (g + 1) + 1) / (b ** (g + 2) - b ** (g + 1) - b + 1)  # noqa: E731
    assert printed(0.5, 0) != pytest.approx(1.0)  # γ = 0 means Y ≡ 1
    for beta, gamma in [(0.5, 0), (0.3, 3), (0.8, 6)]:
        exact = sum(y * beta ** (y - 1) for y in range(1, gamma + 2)) / sum(beta ** (y - 1) for y in range(1, gamma + 2))
        assert est.truncated_mean(beta, gamma) == pytest.approx(exact)


def test_estimator_edges():
    assert est.acc_mle_truncated([1, 1, 1], [3, 3, 3]) == 0.0
    assert est.acc_mle_truncated([4, 4], [3, 3], acc_max=0.9) == 0.9
    assert math.isnan(est.acc_mle_truncated([1, 1], [0, 0]))  # γ = 0 rounds carry no information
    assert math.isnan(est.acc_eq2([0, 0], [0, 0], 0.9))
    assert est.acc_eq2([3, 3], [3, 3], 0.9) == 0.9            # Eq. 2 capped at Acc_max (§4.1)
    assert est.acc_eq2([1, 0, 2], [2, 2, 2], 1.0) == pytest.approx(3 / (3 + 2))
    with pytest.raises(ValueError):
        est.acc_mle_truncated([5], [3])


def test_expected_tokens_is_eq10():
    for beta in (0.0, 0.4, 0.9):
        for g in range(6):
            series = 1 + sum(i * beta ** i * (1 - beta) for i in range(1, g)) + g * beta ** g
            assert est.expected_tokens(beta, g) == pytest.approx(series)
    assert est.expected_tokens(1.0, 3) == 4


@pytest.mark.parametrize("acc,a_q,b0,b1", [(0.6, 0.17, 1.0, 0.0), (0.8, 0.1, 1.0, 0.05), (0.9, 0.3, 2.0, 0.4),
                                           (0.3, 0.2, 1.0, 0.0), (0.95, 0.02, 1.0, 0.01)])
def test_best_gamma_maximises_eq1(acc, a_q, b0, b1):
    b_p = lambda g: b0 + b1 * g  # noqa: E731
    assert est.best_gamma(acc, a_q, b_p, 1, 12) == objective_argmax(acc, a_q, b_p, 1, 12)


def test_verify_cost_line_fit():
    g = [1, 2, 3, 4, 5, 6] * 3
    b0, b1 = est.fit_verify_cost(g, [2.0 + 0.5 * x for x in g])
    assert (b0, b1) == (pytest.approx(2.0, abs=1e-3), pytest.approx(0.5, abs=1e-3))
    assert est.fit_verify_cost([4, 4, 4], [1.0, 1.2, 0.8]) == (pytest.approx(1.0), 0.0)  # no spread: constant
    assert est.fit_verify_cost([1, 2, 3], [3.0, 2.0, 1.0])[1] == 0.0                      # slope never negative
