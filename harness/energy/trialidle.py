"""The idle measured right at each polled trial's edges, and the trials' powers made comparable with it
(issue 30.3: a load riding on a wandering idle).

The polled estimate is the mean over trials of each trial's measured power p̂_k = p_k + n_k, and its error is
the mean of the noise n_k alone: each trial's true power p_k is what its own runs drew (the truth sums them). The
split-half difference of :mod:`.polledbound` is a draw of that noise only where the trials' true powers are alike;
on an idle that wanders (seconds to minutes) they are not — eight trials of several seconds each sit at different
points of the wander, and d then holds their real differences (1-3 % against errors of 0.01-0.04 % in issue 30's
study), so the calibrated figure was stated, 26-34 × the error.

What the idle does during a trial cannot be read (the GPU is working), but it is read right before the trial (the
readings the aim waits through, :func:`edge_idle`) and right after it (the readings the extension draws). The part
of the trials' powers that these two explain linearly, p̂_k ≈ α + β₁ I_before,k + β₂ I_after,k (least squares), is
taken out before the split-half is formed (:func:`comparable`). Two edge values are enough for a linear drift over
the trial, and for a sinusoidal wander of any phase seen by trials of one length (its mean over the trial is a
linear combination of its values at the two ends); a load whose own power follows the idle (rides on it) is
absorbed by β.

The residuals r = (I − H) p̂ (H the hat matrix of the fit) are r = (I − H) n where the model holds, so the
split-half contrast c (±1/(2 n_half), c·1 = 0) of the residuals has variance σ² c'(I − H) c, not σ² c'c: d is
scaled up by √(c'c / c'(I − H) c) to stay an unbiased draw of the estimate's noise (the fit never makes d look
smaller on average). Where the model does not hold (the idle explains little) the residuals still carry the real
differences the fit missed: d over-states, on the safe side. Noise in the edge readings (the idle's measured
uncertainty) enters the fit as noise in the regressors: it leaves more of the trials' differences in r (over-
stated again); the gross estimate itself is not changed (the idle at the extension's edges keeps its own term,
:func:`harness.energy.polled._trial_energies`). Not used with fewer than 6 trials, where an edge value is missing,
or where the fit would explain most of the contrast itself (c'(I − H) c < c'c / 4: the halves' idle differs
systematically), and only where the edges explain the trials' powers (an F-test at 99 %: the trials differ by
more than their noise — each edge value is one reading of the idle, noisier than a trial's mean, so a fit to
chance would add its noise to d) and the scaled d is the smaller: elsewhere the raw powers are kept, as before.
(The smaller of the two is taken only where the F-test says the raw d holds real differences, an upward bias;
where it fires by chance, 1 % of measurements, the choice can lower d: a small part of 1 %.)
"""
from __future__ import annotations

import math

import numpy as np

NAN = math.nan
MIN_TRIALS = 6
MAX_INFLATION = 4.0  # c'c / c'(I − H) c above this: the fit explains the contrast itself (raw powers kept)


def edge_idle(seen: list[list], since: float, window: float, until: float, last: bool = True) -> float:
    """Idle power (W, devices summed) from the readings in ``seen`` (each device's refreshes: ``t``, ``value``,
    ``halfwidth``) whose averaging window lies wholly in [``since``, ``until``]: per device the one nearest the
    trial — the last (``last``: before it) or the first (after it). NaN where a device has none."""
    total = 0.0
    for refreshes in seen:
        values = [r.value for r in refreshes if r.t - r.halfwidth - window >= since and r.t + r.halfwidth <= until]
        if not values:
            return NAN
        total += values[-1] if last else values[0]
    return total


def comparable(trials, powers: list[float]) -> tuple[list[float], float, int]:
    """The trials' powers with what the idle at their edges (``trial.idle_edges``: before, after; W) explains
    taken out (their mean kept), the factor (≥ 1) the split-half difference's variance is to be scaled by
    (module docstring) and how many regressors were fitted besides the mean (degrees of freedom the trials'
    scatter loses); ``powers``, 1.0, 0 where the fit is not used."""
    k = len(powers)
    edges = [getattr(t, "idle_edges", None) or [] for t in trials]
    if k < MIN_TRIALS or not all(len(e) == 2 and all(math.isfinite(x) for x in e) for e in edges):
        return list(powers), 1.0, 0
    x = np.array(edges, dtype=float)
    x = x - x.mean(axis=0)
    columns = [np.ones(k)] + [x[:, j] for j in range(2) if np.ptp(x[:, j]) > 1e-9 * max(1.0, np.abs(x).max())]
    u, s, _ = np.linalg.svd(np.column_stack(columns), full_matrices=False)
    q = u[:, s > s[0] * 1e-8]
    if q.shape[1] >= k - 2:
        return list(powers), 1.0, 0
    halves = [t.stratum % 2 if t.stratum >= 0 else i % 2 for i, t in enumerate(trials)]
    n_half = [halves.count(0), halves.count(1)]
    if min(n_half) == 0:
        return list(powers), 1.0, 0
    c = np.array([(1.0 if h == 0 else -1.0) / (2 * n_half[h]) for h in halves])
    c_res = c - q @ (q.T @ c)
    inflation = float(c @ c) / max(float(c_res @ c_res), 1e-300)
    if inflation > MAX_INFLATION:
        return list(powers), 1.0, 0
    p = np.array(powers, dtype=float)
    residual = p - q @ (q.T @ p)
    extra, rss = q.shape[1] - 1, float(residual @ residual)
    if extra == 0 or not _explains(float(((p - p.mean()) ** 2).sum()) - rss, rss, extra, k - q.shape[1]):
        return list(powers), 1.0, 0
    if abs(float(c @ residual)) * math.sqrt(inflation) >= abs(float(c @ p)):  # the fit would not lower d
        return list(powers), 1.0, 0
    return [float(r) + float(p.mean()) for r in residual], inflation, q.shape[1] - 1


def _explains(explained: float, rss: float, extra: int, dof: int) -> bool:
    """Whether the idle at the edges explains the trials' powers (F-test at 99 %): only then do they differ
    by more than their noise, and the fit is used (each edge value is one or two readings of the idle, far
    noisier than the mean of a trial's hundreds: subtracting what they explain by chance adds noise to d)."""
    from scipy.stats import f

    if rss <= 0:
        return explained > 0
    return (explained / extra) / (rss / dof) > float(f.ppf(0.99, extra, dof))
