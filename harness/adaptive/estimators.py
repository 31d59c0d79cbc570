"""The adaptive paper's analytic model of speculation, as pure functions (no models, no torch).

* :func:`expected_tokens` — tokens committed per round, Σ_{i=0..γ} β^i = (1 − β^{γ+1})/(1 − β) (App. B.1, Eq. 10);
* :func:`objective` — Eq. 1: expected tokens per unit time, (1 − Acc^{γ+1}) / ((1 − Acc)(γ a_q + b_p(γ)));
* :func:`best_gamma` — the integer γ in [γ_min, γ_max] maximising Eq. 1 (App. B.3);
* :func:`acc_eq2` — Eq. 2: Σ V / (Σ V + Σ 1(V < γ)) over recent rounds, capped at Acc_max (§4.1);
* :func:`acc_mle_truncated` — the exact MLE of App. B.2 (Eq. 11-12), by safeguarded Newton's method;
* :func:`fit_verify_cost` — b_p(γ) as a least-squares line in γ over recent verification times.

Two models of a round's accept length Y = V + 1 (V accepted drafts), and their MLEs:

* *censored* (what speculative decoding produces when each draft is accepted independently with
  probability β): P(Y = y) = (1 − β) β^{y−1} for y ≤ γ, P(Y = γ + 1) = β^γ. Its log-likelihood
  Σ_j [V_j log β + 1(V_j < γ_j) log(1 − β)] is maximised in closed form by
  Σ V / (Σ V + Σ 1(V < γ)) — exactly Eq. 2 (before the cap), for any mix of γ_j;
* *truncated* (App. B.2, Eq. 11): P(Y = y) = (1 − β) β^{y−1} / (1 − β^{γ+1}), y = 1..γ+1, i.e. the
  geometric conditioned on Y ≤ γ + 1. Its MLE solves Eq. 12. On censored data it over-estimates β
  (e.g. β = 0.7, γ = 4 → ≈ 0.89), and Eq. 2 under-estimates β on truncated data; each is exact
  for its own model (tests/adaptive/test_estimators.py).

Eq. 13 as printed has γ β^{γ+2} in its numerator; dividing Eq. 12 by n gives (γ + 1) β^{γ+2}
(check γ = 0: Y ≡ 1, so ȳ must be 1). :func:`truncated_mean` uses the corrected form.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:  # numpy loads with the two fits that use it, not with the config (harness --help)
    import numpy as np


def expected_tokens(beta: float, gamma: int) -> float:
    """E[tokens committed in a round of depth γ] = Σ_{i=0}^{γ} β^i (App. B.1, Eq. 10)."""
    if beta >= 1.0:
        return float(gamma + 1)
    return (1.0 - beta ** (gamma + 1)) / (1.0 - beta)


def objective(acc: float, gamma: int, a_q: float, b_p: Callable[[int], float] | float) -> float:
    """Eq. 1: expected tokens verified as correct per unit time for window size γ."""
    b = b_p(gamma) if callable(b_p) else float(b_p)
    return expected_tokens(acc, gamma) / (gamma * a_q + b)


def best_gamma(acc: float, a_q: float, b_p: Callable[[int], float] | float, gamma_min: int, gamma_max: int) -> int:
    """argmax_γ of Eq. 1 over the integers γ_min..γ_max (ties: the smaller γ)."""
    best, best_val = gamma_min, -math.inf
    for g in range(gamma_min, gamma_max + 1):
        val = objective(acc, g, a_q, b_p)
        if val > best_val + 1e-12:
            best, best_val = g, val
    return best


def acc_eq2(accepted: Sequence[int], gammas: Sequence[int], acc_max: float) -> float:
    """Eq. 2 over the given rounds, capped at Acc_max (§4.1); NaN when no round drafted anything.

    ``accepted[j]`` is V(γ(j), ·), the drafts accepted in round j; ``gammas[j]`` its γ(j).
    Rounds with γ = 0 carry no information and add nothing to either sum.
    """
    v = sum(accepted)
    rejected = sum(1 for a, g in zip(accepted, gammas) if a < g)
    if v + rejected == 0:
        return float("nan")
    return min(v / (v + rejected), acc_max)


def truncated_mean(beta: float, gamma: int) -> float:
    """E[Y] under App. B.2's Eq. 11 (Eq. 13 with its numerator corrected to (γ + 1) β^{γ+2})."""
    if beta >= 1.0:
        return (gamma + 2) / 2.0
    num = (gamma + 1) * beta ** (gamma + 2) - (gamma + 2) * beta ** (gamma + 1) + 1.0
    den = beta ** (gamma + 2) - beta ** (gamma + 1) - beta + 1.0
    return num / den


def _truncated_score(beta: float, ys: Sequence[float], gs: Sequence[float]) -> tuple[float, float]:
    """d/dβ and d²/dβ² of Σ_j log f(y_j; β, γ_j) under Eq. 11 (plain floats: h is a handful of rounds)."""
    s = ds = 0.0
    log_b = math.log(beta)
    for y, g in zip(ys, gs):
        k = g + 1.0
        one_minus_bk = -math.expm1(k * log_b)  # 1 − β^k without cancellation near β = 1
        bk1 = math.exp((k - 1) * log_b)
        s += (y - 1) / beta - 1.0 / (1 - beta) + k * bk1 / one_minus_bk
        ds += (-(y - 1) / beta ** 2 - 1.0 / (1 - beta) ** 2
               + (k * (k - 1) * bk1 / beta * one_minus_bk + (k * bk1) ** 2) / one_minus_bk ** 2)
    return s, ds


def acc_mle_truncated(accept_lengths: Sequence[int], gammas: Sequence[int], acc_max: float = 1.0,
                      tol: float = 1e-10, max_iter: int = 100) -> float:
    """The exact MLE of App. B.2: β̂ maximising Π_j f(y_j) with f of Eq. 11 (the root of Eq. 12).

    ``accept_lengths[j]`` is y_j = accepted + 1 ∈ 1..γ_j + 1. With one common γ the score equation
    is Eq. 12 (a polynomial with one root in (0, 1)); with rounds of different γ_j it is its sum
    form. Solved by Newton's method safeguarded by bisection on the score's sign. Returns 0 when
    every round was rejected at its first draft, Acc_max when the likelihood increases up to
    β = 1 (e.g. every round fully accepted), NaN when no round drafted anything; capped at Acc_max.
    """
    pairs = [(float(y), float(g)) for y, g in zip(accept_lengths, gammas) if g > 0]  # γ = 0: y ≡ 1, no information
    if not pairs:
        return float("nan")
    if any(y < 1 or y > g + 1 for y, g in pairs):
        raise ValueError("accept lengths must lie in 1..γ+1 for their round")
    if all(y == 1 for y, _ in pairs):
        return 0.0
    ys, gs = [y for y, _ in pairs], [g for _, g in pairs]
    lo, hi = 1e-12, 1 - 1e-6
    if _truncated_score(hi, ys, gs)[0] >= 0:  # score still rising at β → 1
        return float(acc_max)
    beta = 0.5
    for _ in range(max_iter):
        s, ds = _truncated_score(beta, ys, gs)
        if s > 0:
            lo = beta
        else:
            hi = beta
        step = beta - s / ds if ds < 0 else math.nan
        beta_new = step if lo <= step <= hi else 0.5 * (lo + hi)
        if abs(beta_new - beta) < tol:
            beta = beta_new
            break
        beta = beta_new
    return float(min(beta, acc_max))


def eq12_coefficients(accept_lengths: Sequence[int], gamma: int) -> np.ndarray:
    """Coefficients (highest degree first, for ``numpy.roots``) of Eq. 12's polynomial in β̂."""
    import numpy as np

    n, s = len(accept_lengths), float(sum(accept_lengths))
    c = np.zeros(gamma + 3)
    c[0] = s - n * (gamma + 2) + n            # β^{γ+2}
    c[1] = n * (gamma + 2) - s                # β^{γ+1}
    c[-2] += -s                               # β
    c[-1] += s - n                            # 1
    return c


def fit_verify_cost(gammas: Sequence[int], times: Sequence[float], ridge: float = 1e-3) -> tuple[float, float]:
    """b_p(γ) ≈ b0 + b1 γ: least squares over recent rounds' (γ_j, verification time_j).

    The slope is shrunk towards 0 by a small ridge term so that a window where every round used
    the same γ gives a constant b_p instead of a singular fit; it is clipped at 0 (a longer
    verification never costs less); a line whose intercept would be ≤ 0 falls back to the
    constant mean. Returns (b0, b1).
    """
    import numpy as np

    g = np.asarray(gammas, dtype=float)
    t = np.asarray(times, dtype=float)
    if g.size == 0:
        return math.nan, math.nan
    gm, tm = g.mean(), t.mean()
    sxx = float(np.sum((g - gm) ** 2))
    sxy = float(np.sum((g - gm) * (t - tm)))
    b1 = sxy / (sxx + ridge * g.size) if sxx > 0 else 0.0
    b1 = max(b1, 0.0)
    b0 = tm - b1 * gm
    if b0 <= 0:  # a noisy, too steep line: keep b_p positive with the constant model
        b0, b1 = tm, 0.0
    return float(b0), float(b1)
