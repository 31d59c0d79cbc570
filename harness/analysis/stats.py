"""Uncertainty: percentile bootstrap CIs over prompts (GUIDE §5: resample prompts, not tokens),
and mean ± s.d. over seeds (the second level)."""
from __future__ import annotations

import math
import warnings
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats

N_RESAMPLES = 2000
LEVEL = 0.95
SEED = 0
NAN = math.nan


def bootstrap_ci(samples: tuple[np.ndarray, ...], statistic: Callable[..., np.ndarray], *,
                 n_resamples: int = N_RESAMPLES, level: float = LEVEL, seed: int = SEED) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic(*samples, axis=-1)``, resampling the n prompts jointly
    (paired: index i of every sample is one prompt). NaN, NaN with fewer than 2 prompts."""
    arrays = [np.asarray(s, dtype=float) for s in samples]
    n = len(arrays[0])
    if n < 2 or any(len(a) != n for a in arrays):
        return NAN, NAN
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        res = stats.bootstrap(tuple(arrays), statistic, n_resamples=n_resamples, vectorized=True, paired=True,
                              axis=-1, confidence_level=level, method="percentile",
                              rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


# ---- statistics, vectorised over a leading resample axis (``axis=-1`` is the prompt axis) ----------

def mean(x, axis=-1):
    return np.mean(x, axis=axis)


def ratio_of_totals(num_a, den_a, num_b, den_b, axis=-1):
    """(Σ num_a / Σ den_a) ÷ (Σ num_b / Σ den_b): e.g. tokens/s of a method over its baseline's."""
    return (np.sum(num_a, axis=axis) / np.sum(den_a, axis=axis)) / (np.sum(num_b, axis=axis) / np.sum(den_b, axis=axis))


def total_ratio(num, den, axis=-1):
    """Σ num / Σ den: a cell's rate (tokens/s, J/token) as a ratio of totals."""
    return np.sum(num, axis=axis) / np.sum(den, axis=axis)


def geometric_mean(x, axis=-1):
    return np.exp(np.mean(np.log(x), axis=axis))


def estimate(samples: tuple, statistic, **kw) -> tuple[float, float, float]:
    """(point estimate, CI low, CI high)."""
    arrays = [np.asarray(s, dtype=float) for s in samples]
    if not len(arrays[0]):
        return NAN, NAN, NAN
    with np.errstate(all="ignore"):
        point = float(statistic(*arrays, axis=-1))
    lo, hi = bootstrap_ci(tuple(arrays), statistic, **kw)
    return point, lo, hi


def across_seeds(per_seed: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Mean ± s.d. (ddof 1) of one per-seed estimate over seeds, with the number of seeds."""
    g = per_seed.groupby(keys, dropna=False)[value]
    out = g.agg(["mean", "std", "count"]).reset_index()
    return out.rename(columns={"mean": f"{value}_mean", "std": f"{value}_sd", "count": "n_seeds"})
