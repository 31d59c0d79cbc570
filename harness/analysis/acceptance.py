"""Acceptance diagnostics: accept-length histograms, per-position conditional acceptance, and
per-request vs pooled means (GUIDE §5: a mean pooled over rounds, Spec-Bench's MAT, weights long
completions more than the mean of per-request means)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as sps

from harness.analysis import stats

NAN = math.nan
ID = ["cell_id", "label", "method_name", "pair", "dataset", "gpu", "seed", "regime"]


def _drafting(records: pd.DataFrame) -> pd.DataFrame:
    if "rounds" not in records:
        return records.iloc[0:0]
    return records[pd.to_numeric(records["rounds"], errors="coerce").fillna(0) > 0]


def accept_length_histogram(records: pd.DataFrame) -> pd.DataFrame:
    """Per cell × accept length (tokens committed per round): count and fraction of rounds."""
    rows = []
    for _, r in _drafting(records).groupby("cell_id", sort=False):
        lengths = np.concatenate([np.asarray(x, int) for x in r["accept_lengths"]]) if len(r) else np.array([], int)
        if not len(lengths):
            continue
        values, counts = np.unique(lengths, return_counts=True)
        ident = {k: r[k].iloc[0] for k in ID if k in r}
        rows += [{**ident, "accept_length": int(v), "rounds": int(c), "fraction": c / len(lengths)}
                 for v, c in zip(values, counts)]
    return pd.DataFrame(rows)


def conditional_acceptance(records: pd.DataFrame, level: float = stats.LEVEL) -> pd.DataFrame:
    """P(draft position k accepted | positions 1..k−1 accepted and the round drafted ≥ k), with a
    Wilson interval (rounds treated as independent trials). Needs ``round_gammas``."""
    rows = []
    for _, r in _drafting(records).groupby("cell_id", sort=False):
        if "round_gammas" not in r or r["round_gammas"].map(lambda g: not isinstance(g, (list, np.ndarray))).any():
            continue
        a = np.concatenate([np.asarray(x, int) - 1 for x in r["accept_lengths"]])
        g = np.concatenate([np.asarray(x, int) for x in r["round_gammas"]])
        ident = {k: r[k].iloc[0] for k in ID if k in r}
        for k in range(1, int(g.max(initial=0)) + 1):
            reached = int(((a >= k - 1) & (g >= k)).sum())
            if not reached:
                continue
            accepted = int(((a >= k) & (g >= k)).sum())
            ci = sps.binomtest(accepted, reached).proportion_ci(confidence_level=level, method="wilson")
            rows.append({**ident, "position": k, "reached": reached, "accepted": accepted,
                         "rate": accepted / reached, "rate_lo": ci.low, "rate_hi": ci.high})
    return pd.DataFrame(rows)


def per_request_vs_pooled(records: pd.DataFrame, **boot) -> pd.DataFrame:
    """Per cell: mean acceptance length (tokens per round) and acceptance rate, pooled over all
    rounds vs the mean of per-request values (with a bootstrap CI over requests), and the gap."""
    rows = []
    for _, r in _drafting(records).groupby("cell_id", sort=False):
        lengths = [np.asarray(x, float) for x in r["accept_lengths"]]
        n_rounds = np.array([len(x) for x in lengths], float)
        sums = np.array([x.sum() for x in lengths])
        ok = n_rounds > 0
        ident = {k: r[k].iloc[0] for k in ID if k in r}
        row = {**ident, "requests": int(ok.sum()), "rounds": int(n_rounds.sum()),
               "mat_pooled": sums.sum() / n_rounds.sum() if n_rounds.sum() else NAN}
        row["mat_per_request"], row["mat_per_request_lo"], row["mat_per_request_hi"] = stats.estimate(
            (sums[ok] / n_rounds[ok],), stats.mean, **boot)
        acc = pd.to_numeric(r.get("accepted_tokens"), errors="coerce").to_numpy(float)
        pos = pd.to_numeric(r.get("draft_positions"), errors="coerce").to_numpy(float)
        good = np.isfinite(acc) & np.isfinite(pos) & (pos > 0)
        row["acceptance_pooled"] = acc[good].sum() / pos[good].sum() if good.any() else NAN
        row["acceptance_per_request"], row["acceptance_per_request_lo"], row["acceptance_per_request_hi"] = (
            stats.estimate((acc[good] / pos[good],), stats.mean, **boot) if good.any() else (NAN, NAN, NAN))
        row["mat_gap"] = row["mat_pooled"] - row["mat_per_request"]
        rows.append(row)
    return pd.DataFrame(rows)
