"""Theory checks: measured drafting against what the papers' models predict.

SD (Leviathan et al. 2023; GUIDE §5): with each draft token accepted independently with
probability α, a round of depth γ commits A + 1 tokens where A is geometric capped at γ:
P(A = k) = α^k (1 − α) for k < γ and P(A = γ) = α^γ. Its expectation is

    E[A + 1] = (1 − α^(γ+1)) / (1 − α)                                    (Leviathan Eq. 1)

α is estimated by maximum likelihood from the rounds (``accept_lengths``, ``round_gammas``): the
log-likelihood Σ_r [a_r log α + 1(a_r < γ_r) log(1 − α)] is maximised at

    α̂ = Σ_r a_r / (Σ_r a_r + #{r : a_r < γ_r})                           (adaptive Eq. 2)

(adaptive App. B.2 writes the same censored geometric as a "truncated" one; its Eq. 12 normalises
the pmf instead, which is a different model — a round that reached γ is not a rejection.)

Speed-up: with c the cost of one draft call and v the cost of one verification call, both in units
of one AR target step (the paired AR cell's seconds per token), the expected speed-up is
Σ_r E_r / (draft calls · c + target calls · v); with v = 1 and γ draft calls per round it is
Leviathan's improvement factor (1 − α^(γ+1)) / ((1 − α)(γc + 1)). v is measured, not assumed:
on CPU and for large γ a (γ+1)-token verification costs more than one step.

DSBD Theorem 3.2 (dsbd): the expected number of steps per iteration is (1 − m^(γ+1)) / (1 − m) with
m = min(t, β̄), β̄ = E β^(l)_{W_min} the mean over layers of the probability that at least W_min of the layer's
draft beams are accepted, from Eq. 2-5 (the decoder records it per prompt: ``stat.beta_bar`` over
``stat.beta_layers`` layers, pooled here by layer). That is the theorem's own prediction; the realised layer
pass rate β̂ (MLE over layers, as for α̂) is shown beside it but is near-circular as a check (it is fitted to
the very rounds it predicts). A deviation above 10 % between measured and predicted is flagged.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

TOLERANCE = 0.10
NAN = math.nan
DSBD_FAMILY = "dsbd"


def accepted_counts(accept_lengths, round_gammas) -> tuple[np.ndarray, np.ndarray]:
    """(a_r, γ_r) for the rounds that drafted (γ_r > 0); a_r = accept length − 1."""
    a = np.asarray(accept_lengths, float) - 1
    g = np.asarray(round_gammas, float)
    keep = g > 0
    return np.minimum(a[keep], g[keep]), g[keep]


def alpha_mle(accepted, gammas) -> float:
    """MLE of the per-token acceptance probability from capped geometric rounds (module docstring)."""
    a, g = np.asarray(accepted, float), np.asarray(gammas, float)
    total = a.sum()
    rejected = float((a < g).sum())
    if total + rejected == 0:
        return NAN
    return float(total / (total + rejected))


def log_likelihood(alpha: float, accepted, gammas) -> float:
    """Σ_r log P(a_r | γ_r, α) of the capped geometric (for checking :func:`alpha_mle`)."""
    a, g = np.asarray(accepted, float), np.asarray(gammas, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.sum(a * np.log(alpha) + (a < g) * np.log1p(-alpha)))


def expected_tokens_per_round(alpha, gamma):
    """(1 − α^(γ+1)) / (1 − α): expected tokens committed by a round of depth γ (γ + 1 at α = 1)."""
    alpha, gamma = np.asarray(alpha, float), np.asarray(gamma, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.isclose(alpha, 1.0), gamma + 1, (1 - alpha ** (gamma + 1)) / (1 - alpha))
    return out if out.ndim else float(out)


def improvement_factor(alpha: float, gamma: float, c: float, v: float = 1.0) -> float:
    """Expected speed-up over AR: (1 − α^(γ+1)) / ((1 − α)(γc + v)); v = 1 is Leviathan's."""
    return float(expected_tokens_per_round(alpha, gamma) / (gamma * c + v))


def _rounds(r: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """All rounds of a cell: (accept lengths, γ_r) pooled over prompts (γ_r = 0 rounds kept)."""
    lengths, gammas = [], []
    for acc, gam in zip(r["accept_lengths"], r["round_gammas"]):
        lengths.extend(acc)
        gammas.extend(gam)
    return np.asarray(lengths, float), np.asarray(gammas, float)


def pooled_rate(r: pd.DataFrame) -> tuple[tuple | None, str | None]:
    """((accept lengths, γ_r, per-position pass rate by MLE), None) for a cell's records, or
    (None, why not)."""
    if not len(r) or "rounds" not in r or pd.to_numeric(r["rounds"], errors="coerce").fillna(0).sum() <= 0:
        return None, "no drafting rounds"
    if "round_gammas" not in r or r["round_gammas"].map(lambda g: not isinstance(g, (list, np.ndarray))).any():
        return None, ("round_gammas not recorded and not reconstructible from the configured γ "
                      "(e.g. a variable-depth method written before the record contract)")
    lengths, gammas = _rounds(r)
    return (lengths, gammas, alpha_mle(*accepted_counts(lengths, gammas))), None


def _sum(r: pd.DataFrame, col: str) -> float:
    return float(pd.to_numeric(r[col], errors="coerce").sum(min_count=1)) if col in r else NAN


def sd_checks(records: pd.DataFrame, cells: pd.DataFrame, speedups: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per drafting cell: α̂, measured vs predicted tokens per round, and measured vs predicted speed-up.

    ``speedups``: the overall rows of :func:`harness.analysis.paired.paired_ratios` (measured
    speed-up and the baseline cell whose seconds per token define one AR step).
    """
    rows = []
    for _, cell in cells.iterrows():
        r = records[records["cell_id"] == cell["cell_id"]]
        if not len(r) or pd.to_numeric(r.get("rounds"), errors="coerce").fillna(0).sum() <= 0:
            continue
        row = {k: cell.get(k) for k in ("cell_id", "method", "method_name", "label", "pair", "dataset", "gpu", "seed",
                                        "regime")}
        parsed, reason = pooled_rate(r)
        if parsed is None:
            rows.append({**row, "reason": reason})
            continue
        lengths, gammas, alpha = parsed
        predicted = float(np.sum(expected_tokens_per_round(alpha, gammas))) / len(lengths)
        measured = float(lengths.mean())
        nodes, positions = _sum(r, "draft_nodes"), _sum(r, "draft_positions")
        row.update(rounds=len(lengths), mean_gamma=float(gammas.mean()), alpha_mle=alpha,
                   tokens_per_round=measured, tokens_per_round_theory=predicted,
                   tokens_per_round_dev=measured / predicted - 1 if predicted else NAN,
                   block_efficiency=_sum(r, "new_tokens") / _sum(r, "target_calls"),
                   chain=bool(np.isfinite(nodes) and nodes == positions),
                   round_gammas_source=",".join(sorted({str(s) for s in r.get("round_gammas_source",
                                                                               pd.Series(["?"])).dropna()})))
        row.update(_speedup_check(r, cell, speedups, gammas, alpha))
        row["flag"] = _flag(row)
        rows.append(row)
    return pd.DataFrame(rows)


def _speedup_check(r: pd.DataFrame, cell: pd.Series, speedups, gammas, alpha) -> dict:
    out: dict[str, Any] = {"speedup_measured": NAN, "c": NAN, "v": NAN, "speedup_theory": NAN,
                           "speedup_leviathan": NAN, "speedup_dev": NAN, "speedup_reason": None}
    if speedups is None or speedups.empty:
        out["speedup_reason"] = "no paired speed-ups"
        return out
    s = speedups[(speedups["cell_id"] == cell["cell_id"]) & (speedups["category"] == "overall")]
    if s.empty or pd.isna(s["speedup"].iloc[0]):
        out["speedup_reason"] = "no baseline cell to define one AR step"
        return out
    out["speedup_measured"] = float(s["speedup"].iloc[0])
    step = s["baseline_seconds_per_token"].iloc[0] if "baseline_seconds_per_token" in s else NAN
    d_time, v_time = _sum(r, "draft_time_s"), _sum(r, "verify_time_s")
    d_calls, t_calls = _sum(r, "draft_calls"), _sum(r, "target_calls")
    if not (np.isfinite(d_time) and np.isfinite(v_time)) or not np.isfinite(step):
        out["speedup_reason"] = ("draft_time_s / verify_time_s not recorded in this cell (needs the record "
                                 "contract's timing fields and the timing option)")
        return out
    c = (d_time / d_calls) / step if d_calls else 0.0
    v = (v_time / t_calls) / step
    expected = float(np.sum(expected_tokens_per_round(alpha, gammas)))
    out.update(c=c, v=v, speedup_theory=expected / (d_calls * c + t_calls * v),
               speedup_leviathan=improvement_factor(alpha, float(np.mean(gammas)), c, 1.0))
    out["speedup_dev"] = out["speedup_measured"] / out["speedup_theory"] - 1
    return out


def _flag(row: dict) -> str:
    bad = []
    if abs(row.get("tokens_per_round_dev", 0) or 0) > TOLERANCE:
        bad.append(f"tokens/round off by {row['tokens_per_round_dev']:+.0%}")
    if np.isfinite(row.get("speedup_dev", NAN)) and abs(row["speedup_dev"]) > TOLERANCE:
        bad.append(f"speed-up off by {row['speedup_dev']:+.0%}")
    return "; ".join(bad)


def pooled_beta(r: pd.DataFrame) -> float:
    """β̄ over every verified layer of a cell's prompts (``stat.beta_bar`` weighted by ``stat.beta_layers``)."""
    if "stat.beta_bar" not in r or "stat.beta_layers" not in r:
        return NAN
    b = pd.to_numeric(r["stat.beta_bar"], errors="coerce")
    n = pd.to_numeric(r["stat.beta_layers"], errors="coerce").fillna(0)
    ok = b.notna() & (n > 0)
    return float((b[ok] * n[ok]).sum() / n[ok].sum()) if ok.any() else NAN


def dsbd_checks(records: pd.DataFrame, cells: pd.DataFrame, family: str = DSBD_FAMILY) -> pd.DataFrame:
    """Theorem 3.2 per DSBD cell: β̄ from Eq. 2-5 (recorded), m = min(t, β̄), predicted vs measured steps per
    iteration (tokens committed per iteration); beside it the same with the realised pass rate β̂ (MLE)."""
    rows = []
    for _, cell in cells[cells["family"] == family].iterrows():
        r = records[records["cell_id"] == cell["cell_id"]]
        row = {k: cell.get(k) for k in ("cell_id", "method", "label", "pair", "dataset", "gpu", "seed", "regime")}
        parsed, reason = pooled_rate(r)
        if parsed is None:
            rows.append({**row, "reason": reason})
            continue
        lengths, gammas, beta_hat = parsed
        t = float(cell.get("param.threshold", NAN))
        beta = pooled_beta(r)
        m = min(t, beta) if np.isfinite(t) and np.isfinite(beta) else (beta if np.isfinite(beta) else NAN)
        predicted = float(np.mean(expected_tokens_per_round(m, gammas))) if np.isfinite(m) else NAN
        measured = float(lengths.mean())
        dev = measured / predicted - 1 if np.isfinite(predicted) and predicted else NAN
        m_hat = min(t, beta_hat) if np.isfinite(t) else beta_hat
        rows.append({**row, "iterations": len(lengths), "gamma": float(gammas.max()), "threshold_t": t,
                     "beta_bar": beta, "m": m, "steps_measured": measured, "steps_theorem": predicted,
                     "deviation": dev, "pass_rate_mle": beta_hat, "m_realised": m_hat,
                     "steps_with_pass_rate": float(np.mean(expected_tokens_per_round(m_hat, gammas))),
                     "flag": f"off by {dev:+.0%}" if np.isfinite(dev) and abs(dev) > TOLERANCE else "",
                     "reason": None if np.isfinite(beta) else
                     "β̄ not recorded (records from before stat.beta_bar): no theorem prediction; β̂ shown"})
    return pd.DataFrame(rows)
